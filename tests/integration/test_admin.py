"""The Django admin is usable for raw records: every registered model's list, search and add pages render."""
import pytest
from django.contrib import admin
from django.urls import reverse

pytestmark = pytest.mark.django_db


def _registered():
    return [(m._meta.app_label, m._meta.model_name) for m in admin.site._registry
            if m._meta.app_label in ("scheduler", "colocation")]


@pytest.mark.parametrize(("app", "model"), _registered())
def test_operator_can_browse_and_add(world, client, app, model):
    client.force_login(world.users["operator"])
    world.submit()  # a job and a decision, so list pages have rows to render
    changelist = client.get(reverse(f"admin:{app}_{model}_changelist"), {"q": "a"})
    assert changelist.status_code == 200
    add = client.get(reverse(f"admin:{app}_{model}_add"))
    assert add.status_code == (403 if model == "nodetransition" else 200)  # transitions start through the API


def test_users_and_tokens_stay_with_superusers(world, client):
    client.force_login(world.users["operator"])
    assert client.get(reverse("admin:auth_user_changelist")).status_code == 403


def test_non_staff_users_are_sent_to_login(world, client):
    client.force_login(world.users["member"])
    response = client.get(reverse("admin:scheduler_trainingjob_changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
