from django.urls import path

from notifications.api import views

ROUTES = [
    ("notifications/deliveries", views.DeliveryViewSet, "notification-delivery"),
    ("notifications/department-subscriptions", views.SubscriptionViewSet, "notification-subscription"),
]
URLS = [
    path("notifications/preferences/", views.PreferenceView.as_view(), name="notification-preferences"),
]
