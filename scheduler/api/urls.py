from scheduler.api import views

ROUTES = [
    ("departments", views.DepartmentViewSet, "department"),
    ("frameworks", views.FrameworkViewSet, "framework"),
    ("quotas", views.QuotaViewSet, "quota"),
    ("jobs", views.TrainingJobViewSet, "job"),
]
