"""The notification settings page: the user's preferences, an admin's department subscriptions, and what was sent."""
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.errors import ApplicationError
from frontend.forms import apply_errors
from frontend.lists import ObjectList
from frontend.notifications.forms import PreferenceForm, SubscriptionForm
from frontend.notifications.tables import DeliveryTable
from notifications import selectors, services
from notifications.filtersets import DeliveryFilterSet

DELIVERIES = ObjectList(table=DeliveryTable, per_page=25, template="frontend/notifications/settings.html",
                        filterset=DeliveryFilterSet, filter_fields=("status", "channel"))


def _preference_form(user) -> PreferenceForm:
    p = selectors.preference_of(user=user)
    return PreferenceForm(initial={"events": p.events, "waiting_hours": p.waiting_hours, "email": p.email,
                                   "email_address": user.email, "webhook_url": p.webhook_url})


def _subscription_forms(user, failed: tuple[int, SubscriptionForm] | None) -> list[dict]:
    """One form per department the user administers, filled from their subscription (or the defaults)."""
    subscribed = {s.department_id: s for s in selectors.subscriptions_of(user=user)}
    rows = []
    for department in selectors.administered_departments(user=user).order_by("name"):
        s = subscribed.get(department.pk)
        if failed is not None and failed[0] == department.pk:
            form = failed[1]
        else:
            form = SubscriptionForm(prefix=f"d{department.pk}", initial={
                "events": s.events if s else ["quota_full", "failing_repeatedly"], "email": s.email if s else True,
                "webhook_url": s.webhook_url if s else ""})
        rows.append({"department": department, "subscription": s, "form": form})
    return rows


@login_required
def notification_settings(request, *, form: PreferenceForm | None = None,
                          failed: tuple[int, SubscriptionForm] | None = None, status: int = 200):
    response = DELIVERIES.render(
        request, selectors.deliveries_to(user=request.user), form=form or _preference_form(request.user),
        subscriptions=_subscription_forms(request.user, failed), breadcrumbs=[("Notifications", None)])
    response.status_code = status
    return response


@login_required
@require_POST
def preference_save(request):
    form = PreferenceForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        if "email_address" not in request.POST:  # a form without the field leaves the address as it is
            data = {k: v for k, v in data.items() if k != "email_address"}
        try:
            services.preference_set(user=request.user, **data)
        except ApplicationError as error:
            apply_errors(form, error)
        else:
            messages.success(request, "Notification settings saved.")
            return redirect("notifications")
    return notification_settings(request, form=form, status=400)


@login_required
@require_POST
def subscription_save(request, name: str):
    """Subscribe to the department's events (or change the subscription), or unsubscribe (`unsubscribe`)."""
    department = get_object_or_404(selectors.administered_departments(user=request.user), name=name)
    if "unsubscribe" in request.POST:
        subscription = selectors.subscriptions_of(user=request.user).filter(department=department).first()
        if subscription is not None:
            services.subscription_delete(subscription=subscription)
            messages.success(request, f"Unsubscribed from {department}'s events.")
        return redirect(reverse("notifications") + "#departments")
    form = SubscriptionForm(request.POST, prefix=f"d{department.pk}")
    if form.is_valid():
        try:
            services.subscription_set(user=request.user, department=department, **form.cleaned_data)
        except ApplicationError as error:
            apply_errors(form, error)
        else:
            messages.success(request, f"Subscribed to {department}'s events.")
            return redirect(reverse("notifications") + "#departments")
    return notification_settings(request, failed=(department.pk, form), status=400)
