from django.urls import path

from profiling.api import views

ROUTES = [
    ("task-profiles", views.TaskProfileViewSet, "task-profile"),
    ("forecast-models", views.ForecastModelViewSet, "forecast-model"),
]
# A read-only sub-resource of the scheduler's jobs.
URLS = [
    path("jobs/<int:pk>/profile/", views.JobProfileView.as_view(), name="job-profile"),
]
