from core.api import views

# Departments are served by the scheduler's subclass, which adds their quota usage (scheduler/api/urls.py).
ROUTES = [
    ("memberships", views.MembershipViewSet, "membership"),
    ("gpu-models", views.GPUModelViewSet, "gpu-model"),
    ("decisions", views.DecisionViewSet, "decision"),
]
