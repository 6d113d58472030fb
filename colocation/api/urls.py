from django.urls import path

from colocation.api import views

ROUTES = [
    ("resource-groups", views.ResourceGroupViewSet, "resource-group"),
    ("nodes", views.NodeViewSet, "node"),
    ("inference-services", views.InferenceServiceViewSet, "inference-service"),
    ("transitions", views.TransitionViewSet, "transition"),
]
# Read-only sub-resources of the inference services: their load and forecasts, kept by profiling.
URLS = [
    path("inference-services/<int:pk>/load/", views.ServiceLoadView.as_view(), name="inference-service-load"),
    path("inference-services/<int:pk>/forecasts/", views.ServiceForecastsView.as_view(),
         name="inference-service-forecasts"),
]
