from django.urls import path

from profiling.api import views

ROUTES = [
    ("task-profiles", views.TaskProfileViewSet, "task-profile"),
    ("forecast-models", views.ForecastModelViewSet, "forecast-model"),
]
# Read-only sub-resources of the scheduler's jobs and the colocation app's inference services.
URLS = [
    path("jobs/<int:pk>/profile/", views.JobProfileView.as_view(), name="job-profile"),
    path("inference-services/<int:pk>/load/", views.ServiceLoadView.as_view(), name="inference-service-load"),
    path("inference-services/<int:pk>/forecasts/", views.ServiceForecastsView.as_view(),
         name="inference-service-forecasts"),
]
