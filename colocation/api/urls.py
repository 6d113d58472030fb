from colocation.api import views

ROUTES = [
    ("resource-groups", views.ResourceGroupViewSet, "resource-group"),
    ("nodes", views.NodeViewSet, "node"),
    ("inference-services", views.InferenceServiceViewSet, "inference-service"),
    ("transitions", views.TransitionViewSet, "transition"),
]
