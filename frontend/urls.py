from django.contrib.auth import views as auth_views
from django.urls import path

from frontend import views
from frontend.dashboards import views as ops
from frontend.departments import views as departments
from frontend.jobs import views as jobs
from frontend.notifications import views as notifications
from frontend.services import views as services

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("department/", views.department_switch, name="department-switch"),
    path("metrics", views.metrics, name="metrics"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/cancel/", jobs.job_bulk_cancel, name="jobs-cancel"),
    path("jobs/new/", jobs.job_submit, name="job-submit"),
    path("jobs/new/gpu-models/", jobs.gpu_model_options, name="job-gpu-models"),
    path("jobs/<int:pk>/", jobs.job_detail, name="job"),
    path("jobs/<int:pk>/cancel/", jobs.job_cancel, name="job-cancel"),
    path("jobs/<int:pk>/keep-request/", jobs.job_keep_request, name="job-keep-request"),
    path("departments/", departments.department_list, name="departments"),
    path("quota-tree/", departments.department_tree, name="department-tree"),
    path("quota-tree/<slug:name>/weight/", departments.department_weight, name="department-weight"),
    path("quota-tree/add/", departments.department_child, name="department-child"),
    path("quota-tree/move/", departments.department_move, name="department-move"),
    path("quota-tree/quota/", departments.department_quota, name="department-quota"),
    path("departments/<slug:name>/", departments.department_detail, name="department"),
    path("departments/<slug:name>/members/", departments.member_add, name="department-member-add"),
    path("departments/<slug:name>/members/<int:pk>/", departments.member_change, name="department-member"),
    path("services/", services.service_list, name="services"),
    path("services/new/", services.service_create, name="service-create"),
    path("services/<slug:name>/", services.service_detail, name="service"),
    path("services/<slug:name>/edit/", services.service_edit, name="service-edit"),
    path("ops/", ops.overview, name="ops"),
    path("ops/nodes/", ops.nodes, name="ops-nodes"),
    path("ops/nodes/<str:name>/<slug:verb>/", ops.node_action, name="ops-node-action"),
    path("ops/quotas/", ops.quotas, name="ops-quotas"),
    path("ops/autoscaling/", ops.autoscaling, name="ops-autoscaling"),
    path("ops/decisions/", ops.decisions, name="ops-decisions"),
    path("ops/replays/", ops.replays, name="ops-replays"),
    path("ops/replays/<int:pk>/", ops.replay_detail, name="ops-replay"),
    path("ops/replays/<int:pk>/<str:name>", ops.replay_plot, name="ops-replay-plot"),
    path("notifications/", notifications.notification_settings, name="notifications"),
    path("notifications/preferences/", notifications.preference_save, name="notification-preferences-save"),
    path("notifications/departments/<slug:name>/", notifications.subscription_save, name="notification-subscription"),
]
