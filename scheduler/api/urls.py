from scheduler.api import views

ROUTES = [
    ("departments", views.DepartmentViewSet, "department"),
    ("memberships", views.MembershipViewSet, "membership"),
    ("gpu-models", views.GPUModelViewSet, "gpu-model"),
    ("frameworks", views.FrameworkViewSet, "framework"),
    ("quotas", views.QuotaViewSet, "quota"),
    ("jobs", views.TrainingJobViewSet, "job"),
    ("decisions", views.DecisionViewSet, "decision"),
]
