"""Notifications end to end (docs/concepts/notifications.md#how-it-works): the decision log becomes deliveries,
e-mail reaches a real SMTP
server (aiosmtpd) and webhooks a local HTTP server, retries deliver once, and the API and console refuse bad input."""
import json
import socket
import threading
from datetime import timedelta
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from core.models import Membership
from notifications import selectors
from notifications import services as notify
from notifications import tasks
from notifications.models import DepartmentSubscription, Delivery, Episode, Event, Preference
from scheduler import lifecycle
from scheduler.models import JobRun, JobStatus, TrainingJob
from tests.integration.livecluster import tick

pytestmark = pytest.mark.django_db


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Inbox:
    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.rcpt_tos, message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture
def smtp(settings):
    """A real SMTP server on a free port, and Django's SMTP backend pointed at it."""
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=_free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = "127.0.0.1", controller.port, False
    settings.DEFAULT_FROM_EMAIL = "tidal@cluster.test"
    yield inbox
    controller.stop()


class _Receiver(ThreadingHTTPServer):
    def __init__(self, fail_first: int = 0):
        super().__init__(("127.0.0.1", 0), _Hook)
        self.fail_first, self.calls, self.bodies = fail_first, 0, []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/T000/secret-token"


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.calls += 1
        if self.server.calls <= self.server.fail_first:
            self.send_response(500)
        else:
            self.server.bodies.append(body)
            self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def hooks():
    """Start local webhook receivers: hooks(fail_first=N) answers 500 to its first N calls."""
    started = []

    def start(fail_first: int = 0) -> _Receiver:
        server = _Receiver(fail_first)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def _addresses(world):
    for role, user in world.users.items():
        user.email = f"{user.username}@cluster.test"
        user.save(update_fields=["email"])


def _scan() -> int:
    return tasks.scan.apply().get()


def test_a_preempted_jobs_submitter_gets_an_email_and_a_webhook_call(world, cluster, smtp, hooks, eager):
    _addresses(world)
    hook = hooks()
    response = world.client("outsider").put("/api/notifications/preferences/", {
        "events": ["preempted", "failed"], "waiting_hours": 6, "email": True, "webhook_url": hook.url})
    assert response.status_code == 200, response.content
    # docs/concepts/quotas-and-priority.md#preemption — ml-search's own-quota job reclaims the A100s ml-ads (olga) borrowed.
    ads = [world.submit(role="outsider", department="ml-ads", gpus="1", gpu_model="A100", name=f"ads-{i}")
           for i in range(6)]
    tick(cluster)
    world.submit(gpus="4", gpu_model="A100", name="big")
    assert tick(cluster).preempted == 2
    victims = sorted(TrainingJob.objects.filter(pk__in=[j.pk for j in ads], status=JobStatus.PENDING)
                     .values_list("pk", flat=True))

    assert _scan() == 4  # two preemptions, each by e-mail and webhook; the six admissions were not asked for

    assert sorted(to for to, _ in smtp.messages) == [["olga@cluster.test"]] * 2
    subjects = sorted(m["Subject"] for _, m in smtp.messages)
    assert subjects == sorted(f"[Tidal] job {pk} (ads-{ads.index(next(j for j in ads if j.pk == pk))}) preempted"
                              for pk in victims)
    assert all(m["From"] == "tidal@cluster.test" for _, m in smtp.messages)
    assert sorted(b["job"]["id"] for b in hook.bodies) == victims
    assert all(b["event"] == "preempted" and b["text"].startswith("[Tidal] job ") and b["department"] == "ml-ads"
               for b in hook.bodies)
    deliveries = Delivery.objects.filter(user=world.users["outsider"])
    assert {(d.status, d.attempts) for d in deliveries} == {("delivered", 1)}
    assert not Delivery.objects.exclude(user=world.users["outsider"]).exists()  # mia asked for no admissions

    listed = world.client("outsider").get("/api/notifications/deliveries/?channel=webhook").json()
    assert listed["count"] == 2
    assert {row["target"] for row in listed["results"]} == {f"127.0.0.1:{hook.server_address[1]}"}  # no token shown
    assert {row["status"] for row in listed["results"]} == {"delivered"}


def _failed_job(world, role: str = "member", department: str = "ml-search"):
    job = world.submit(role=role, department=department)
    lifecycle.job_finish(job=job, at=timezone.now().timestamp(), status=JobStatus.FAILED, message="failed on t4-0: OOM")
    return job


def test_a_webhook_that_fails_twice_is_delivered_on_the_third_try_once(world, hooks, eager):
    hook = hooks(fail_first=2)
    notify.preference_set(user=world.users["member"], events=["failed"], waiting_hours=6, email=False,
                          webhook_url=hook.url)
    job = _failed_job(world)

    assert _scan() == 1
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("delivered", 3, "")
    assert delivery.delivered_at is not None
    assert hook.calls == 3 and len(hook.bodies) == 1 and hook.bodies[0]["job"]["id"] == job.pk

    tasks.deliver.apply(args=[delivery.pk])  # the task run again (a redelivered message): nothing is sent twice
    assert _scan() == 0
    assert hook.calls == 3 and Delivery.objects.count() == 1


def test_a_webhook_that_keeps_failing_is_given_up_with_its_error_recorded(world, hooks, eager):
    hook = hooks(fail_first=100)
    notify.preference_set(user=world.users["member"], events=["failed"], waiting_hours=6, email=False,
                          webhook_url=hook.url)
    _failed_job(world)
    _scan()
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("failed", notify.MAX_ATTEMPTS)
    assert delivery.last_error == f"webhook at 127.0.0.1:{hook.server_address[1]} answered HTTP 500"
    assert hook.calls == notify.MAX_ATTEMPTS
    row = world.client("member").get(f"/api/notifications/deliveries/{delivery.pk}/").json()
    assert (row["status"], row["attempts"], row["last_error"]) == ("failed", 6, delivery.last_error)


def test_running_the_scan_twice_creates_no_duplicate(world, settings):
    settings.TIDAL_NOTIFY_SETTLE_S = 0
    _addresses(world)
    _failed_job(world)  # failed is a default event, e-mail the default channel
    now = timezone.now()
    first = notify.notifications_scan(now=now)
    assert len(first) == 1
    assert notify.notifications_scan(now=now) == []
    # A scan that died after making its events but before its cursor committed cannot happen (one transaction); a
    # cursor set back anyway (restored from a backup) still tells nothing twice.
    from notifications.models import ScanCursor

    ScanCursor.objects.update(last_decision_id=0)
    assert notify.notifications_scan(now=now) == []
    assert (Event.objects.count(), Delivery.objects.count()) == (1, 1)
    assert Delivery.objects.get().target == "mia@cluster.test"


def test_a_decision_too_young_to_be_settled_waits_for_the_next_scan(world, settings):
    settings.TIDAL_NOTIFY_SETTLE_S = 30
    _addresses(world)
    _failed_job(world)
    now = timezone.now()
    assert notify.notifications_scan(now=now) == []
    assert len(notify.notifications_scan(now=now + timedelta(seconds=31))) == 1


def test_bad_preferences_are_refused_with_every_field_and_change_nothing(world):
    client = world.client("member")
    response = client.put("/api/notifications/preferences/", {
        "events": ["preempted", "exploded"], "waiting_hours": 0, "email": True, "webhook_url": "ftp://hooks.test/x"})
    assert response.status_code == 400
    fields = response.json()["extra"]["fields"]
    assert fields["events"] == ["unknown event 'exploded'; choose from admitted, preempted, taken_back, finished, "
                                "failed, waiting_long"]
    assert fields["waiting_hours"] == ["Ensure this value is greater than or equal to 1."]
    assert fields["webhook_url"] == ["must be an http:// or https:// URL with a host"]
    for body, field in (({"events": "preempted"}, "events"), ({"waiting_hours": "6"}, "waiting_hours"),
                        ({"email": "yes"}, "email"), ({"webhook_url": "javascript:alert(1)"}, "webhook_url"),
                        ({"webhook_url": "http://[::1/x"}, "webhook_url"), ({"webhook_url": "http://a\x00b/"}, "webhook_url"),
                        ({"events": [1]}, "events"), ({"waiting_hours": 721}, "waiting_hours"),
                        ({"events": ["quota_full"]}, "events")):
        response = client.patch("/api/notifications/preferences/", body)
        assert response.status_code == 400, body
        assert field in response.json()["extra"]["fields"], response.json()
    assert not Preference.objects.exists()
    defaults = client.get("/api/notifications/preferences/").json()
    assert defaults["events"] == ["preempted", "taken_back", "failed"]
    assert (defaults["email"], defaults["webhook_url"], defaults["waiting_hours"]) == (True, "", 6)

    response = client.patch("/api/notifications/preferences/", {"events": ["admitted", "waiting_long"],
                                                                "waiting_hours": 2})
    assert response.status_code == 200
    assert response.json()["events"] == ["admitted", "waiting_long"] and response.json()["email"] is True


def test_only_department_admins_subscribe_to_department_events(world):
    member = world.client("member").post("/api/notifications/department-subscriptions/",
                                         {"department": "ml-search", "events": ["quota_full"]})
    assert member.status_code == 400
    assert member.json()["extra"]["fields"]["department"] == [
        "only admins of ml-search and operators subscribe to its events"]
    admin = world.client("dept_admin")
    other = admin.post("/api/notifications/department-subscriptions/", {"department": "ml-ads", "events": []})
    assert other.status_code == 400 and "department" in other.json()["extra"]["fields"]
    bad = admin.post("/api/notifications/department-subscriptions/",
                     {"department": "ml-search", "events": ["waiting_long"], "webhook_url": "hooks.test"})
    assert bad.status_code == 400 and set(bad.json()["extra"]["fields"]) == {"events", "webhook_url"}
    assert not DepartmentSubscription.objects.exists()
    ok = admin.post("/api/notifications/department-subscriptions/",
                    {"department": "ml-search", "events": ["quota_full", "failed"]})
    assert ok.status_code == 201, ok.content
    assert ok.json()["user"] == "adam"
    assert world.client("member").get("/api/notifications/department-subscriptions/").json()["count"] == 0
    assert world.client("member").get(
        f"/api/notifications/department-subscriptions/{ok.json()['id']}/").status_code == 404
    # An operator changes it: still adam's; a department it does not have is refused.
    operator = world.client("operator")
    changed = operator.patch(f"/api/notifications/department-subscriptions/{ok.json()['id']}/", {"events": ["failed"]})
    assert changed.status_code == 200 and changed.json()["user"] == "adam"
    moved = operator.patch(f"/api/notifications/department-subscriptions/{ok.json()['id']}/", {"department": "ml-ads"})
    assert moved.status_code == 400 and "department" in moved.json()["extra"]["fields"]
    assert DepartmentSubscription.objects.get().events == ["failed"]


def test_another_users_deliveries_are_not_visible(world, settings):
    settings.TIDAL_NOTIFY_SETTLE_S = 0
    _addresses(world)
    _failed_job(world, role="outsider", department="ml-ads")
    notify.notifications_scan(now=timezone.now())
    delivery = Delivery.objects.get()
    assert delivery.user == world.users["outsider"]
    for role in ("member", "dept_admin"):
        client = world.client(role)
        assert client.get("/api/notifications/deliveries/").json()["count"] == 0
        assert client.get(f"/api/notifications/deliveries/{delivery.pk}/").status_code == 404
    assert world.client("anonymous").get("/api/notifications/deliveries/").status_code == 401
    assert world.client("outsider").get("/api/notifications/deliveries/").json()["count"] == 1
    # Operators read everything (docs/reference/permissions.md#roles), one user's with ?user=; their console shows their own.
    operator = world.client("operator")
    assert operator.get("/api/notifications/deliveries/?user=olga").json()["results"][0]["user"] == "olga"
    assert operator.get("/api/notifications/deliveries/?user=otto").json()["count"] == 0
    console = Client()
    console.force_login(world.users["operator"])
    assert "[Tidal] job" not in console.get("/notifications/").content.decode()
    assert "olga@cluster.test" not in Client().get("/notifications/").content.decode()  # signed out: the sign-in


def test_still_waiting_is_told_once_per_pending_period(world, settings):
    settings.TIDAL_NOTIFY_SETTLE_S = 0
    _addresses(world)
    notify.preference_set(user=world.users["member"], events=["waiting_long"], waiting_hours=6, email=True,
                          webhook_url="")
    job = world.submit()
    now = timezone.now()
    assert notify.notifications_scan(now=now + timedelta(hours=5)) == []
    assert len(notify.notifications_scan(now=now + timedelta(hours=6, minutes=1))) == 1
    assert notify.notifications_scan(now=now + timedelta(hours=9)) == []
    assert Event.objects.get().subject == f"[Tidal] job {job.pk} (resnet50) still waiting after hours"
    assert Event.objects.get().body.startswith("still waiting after 6 h 1 min")

    # Admitted, then preempted at +10 h: a new pending period, told again 6 hours later.
    JobRun.objects.create(job=job, attempt=1, started_at=now + timedelta(hours=9), ended_at=now + timedelta(hours=10),
                          outcome=JobRun.Outcome.PREEMPTED, pod=f"job-{job.pk}-1")
    assert notify.notifications_scan(now=now + timedelta(hours=15)) == []
    assert len(notify.notifications_scan(now=now + timedelta(hours=16, minutes=5))) == 1
    assert Event.objects.filter(kind="waiting_long").count() == 2


def test_department_admins_hear_of_a_full_quota_and_repeated_failures_once_per_episode(world, settings):
    settings.TIDAL_NOTIFY_SETTLE_S, settings.TIDAL_NOTIFY_FAILURES = 0, 3
    _addresses(world)
    notify.subscription_set(user=world.users["dept_admin"], department=world.departments["ml-search"],
                            events=["quota_full", "failing_repeatedly"], email=True, webhook_url="")
    # ml-search's T4 quota: own 2 + borrowed 1.
    held = [world.hold(world.submit(name=f"t4-{i}"), quota_kind=kind) for i, kind in enumerate(("own", "own",
                                                                                                 "borrowed"))]
    now = timezone.now()
    assert len(notify.notifications_scan(now=now)) == 1
    assert notify.notifications_scan(now=now) == []  # the same episode
    event = Event.objects.get(kind="quota_full")
    assert event.body.startswith("ml-search's T4 GPU quota is fully used: own 2/2, borrowed 1/1")
    held[2].status = JobStatus.SUCCEEDED
    held[2].save(update_fields=["status"])
    assert notify.notifications_scan(now=now) == []  # the episode closes
    assert Episode.objects.get().closed_at is not None
    world.hold(world.submit(name="again"), quota_kind="borrowed")
    assert len(notify.notifications_scan(now=now)) == 1  # a new episode
    assert Event.objects.filter(kind="quota_full").count() == 2

    for i in range(3):
        job = world.submit(name=f"crash-{i}", role="dept_admin")
        TrainingJob.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, finished_at=now)
    made = notify.notifications_scan(now=now + timedelta(minutes=1))
    assert [Delivery.objects.get(pk=pk).event.kind for pk in made] == ["failing_repeatedly"]
    assert Delivery.objects.get(pk=made[0]).target == "adam@cluster.test"
    assert notify.notifications_scan(now=now + timedelta(minutes=2)) == []
    # A subscriber who is no longer the department's admin is not served: the next episode opens, nobody is told.
    Membership.objects.filter(user=world.users["dept_admin"]).update(role=Membership.Role.MEMBER)
    TrainingJob.objects.filter(name="again").update(status=JobStatus.SUCCEEDED)
    notify.notifications_scan(now=now + timedelta(minutes=3))
    world.hold(world.submit(name="third"), quota_kind="borrowed")
    assert notify.notifications_scan(now=now + timedelta(minutes=4)) == []
    assert Episode.objects.filter(kind="quota_full", closed_at__isnull=True).count() == 1
    assert Event.objects.filter(kind="quota_full").count() == 2


def _console(world, role: str) -> Client:
    client = Client()
    client.force_login(world.users[role])
    return client


def test_the_settings_page_saves_preferences_and_puts_errors_beside_fields(world):
    client = _console(world, "member")
    page = client.get("/notifications/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/notifications/"' in html and "Sent to me" in html and "Department events" not in html
    bad = client.post("/notifications/preferences/", {"events": ["preempted"], "waiting_hours": "0",
                                                      "webhook_url": "ftp://x.test/"})
    assert bad.status_code == 400
    html = bad.content.decode()
    assert 'id="id_webhook_url_error"' in html and "must be an http:// or https:// URL with a host" in html
    assert 'id="id_waiting_hours_error"' in html
    assert not Preference.objects.exists()
    ok = client.post("/notifications/preferences/", {"events": ["preempted", "finished"], "waiting_hours": "3",
                                                     "email": "on", "webhook_url": "https://hooks.test/x"})
    assert ok.status_code == 302
    p = Preference.objects.get(user=world.users["member"])
    assert (p.events, p.waiting_hours, p.email, p.webhook_url) == (["preempted", "finished"], 3, True,
                                                                    "https://hooks.test/x")

    admin = _console(world, "dept_admin")
    assert "Department events" in admin.get("/notifications/").content.decode()
    assert client.post("/notifications/departments/ml-search/", {"d1-events": ["quota_full"]}).status_code == 404
    search = world.departments["ml-search"]
    response = admin.post("/notifications/departments/ml-search/",
                          {f"d{search.pk}-events": ["quota_full"], f"d{search.pk}-email": "on"})
    assert response.status_code == 302
    assert DepartmentSubscription.objects.get().events == ["quota_full"]
    assert admin.post("/notifications/departments/ml-search/", {"unsubscribe": "1"}).status_code == 302
    assert not DepartmentSubscription.objects.exists()


def test_users_set_their_own_email_address_and_a_bad_one_changes_nothing(world):
    member = world.users["member"]
    before = member.email
    client = world.client("member")
    for bad in ("not-an-address", "a@b", "x" * 250 + "@example.org"):
        response = client.patch("/api/notifications/preferences/", {"email_address": bad, "waiting_hours": 3})
        assert response.status_code == 400, bad
        assert list(response.json()["extra"]["fields"]) == ["email_address"], response.json()
    member.refresh_from_db()
    assert member.email == before and not Preference.objects.exists()  # nothing written, the hours neither

    response = client.patch("/api/notifications/preferences/", {"email_address": " ml.member@example.org "})
    assert response.status_code == 200 and response.json()["email_address"] == "ml.member@example.org"
    member.refresh_from_db()
    assert member.email == "ml.member@example.org"
    response = client.patch("/api/notifications/preferences/", {"waiting_hours": 4})  # left out: unchanged
    assert response.json()["email_address"] == "ml.member@example.org"

    console = _console(world, "member")
    assert 'value="ml.member@example.org"' in console.get("/notifications/").content.decode()
    bad = console.post("/notifications/preferences/", {"events": ["preempted"], "waiting_hours": "6",
                                                       "email": "on", "email_address": "alice at example"})
    assert bad.status_code == 400
    html = bad.content.decode()
    assert 'id="id_email_address_error"' in html and "enter an e-mail address such as alice@example.org" in html
    member.refresh_from_db()
    assert member.email == "ml.member@example.org"
    ok = console.post("/notifications/preferences/", {"events": ["preempted"], "waiting_hours": "6",
                                                      "email": "on", "email_address": ""})
    assert ok.status_code == 302
    member.refresh_from_db()
    assert member.email == ""  # emptied on purpose: no e-mail


def test_a_delivery_whose_queue_message_was_lost_is_sent_by_the_next_scan(world, hooks, eager):
    hook = hooks()
    notify.preference_set(user=world.users["member"], events=["failed"], waiting_hours=6, email=False,
                          webhook_url=hook.url)
    _failed_job(world)
    notify.notifications_scan(now=timezone.now())  # made, but its task never ran (the worker died)
    Delivery.objects.update(created_at=timezone.now() - timedelta(minutes=10))
    assert _scan() == 0  # nothing new ...
    assert Delivery.objects.get().status == "delivered" and len(hook.bodies) == 1  # ... and the lost one sent


# --- one attempt: a claim committed before the send, the outcome after it -------------------------------------------

def _webhook_delivery(world, settings) -> Delivery:
    """A pending webhook delivery of a failed job (nothing sent yet)."""
    settings.TIDAL_NOTIFY_SETTLE_S = 0
    notify.preference_set(user=world.users["member"], events=["failed"], waiting_hours=6, email=False,
                          webhook_url="https://hooks.test/T000/secret-token")
    _failed_job(world)
    notify.notifications_scan(now=timezone.now())
    return Delivery.objects.get()


def _on_another_connection(work):
    """What `work` returns (or raises) run in a thread of its own, hence on a database connection of its own."""
    out = {}

    def run():
        try:
            out["result"] = work()
        except Exception as error:  # re-raised in the test's thread
            out["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if "error" in out:
        raise out["error"]
    return out["result"]


@pytest.mark.django_db(transaction=True)  # the claim commits as in production: another connection sees it
def test_the_send_holds_no_transaction_or_row_lock_and_a_concurrent_attempt_sends_nothing(world, settings,
                                                                                        monkeypatch):
    delivery = _webhook_delivery(world, settings)
    sends, seen = [], {}

    def locked_row():
        with transaction.atomic():  # raises at once if the attempt still held the row's lock
            row = Delivery.objects.select_for_update(nowait=True).get(pk=delivery.pk)
            return row.attempts, row.claimed_until

    def post(*, url, message):
        sends.append(connection.in_atomic_block)
        if len(sends) == 1:
            seen["row"] = _on_another_connection(locked_row)
            seen["other"] = _on_another_connection(lambda: notify.delivery_attempt(delivery_id=delivery.pk))

    monkeypatch.setattr(notify.channels, "post_webhook", post)
    done = notify.delivery_attempt(delivery_id=delivery.pk)

    assert sends == [False]  # sent once, with no transaction open; the concurrent attempt did not send
    attempts, claimed_until = seen["row"]
    assert attempts == 1 and claimed_until > timezone.now()  # the claim was committed before the send
    assert (seen["other"].status, seen["other"].attempts) == ("pending", 1)
    done.refresh_from_db()
    assert (done.status, done.attempts, done.claimed_until, done.last_error) == ("delivered", 1, None, "")


def test_a_live_claim_keeps_other_attempts_off_and_an_expired_one_is_taken_over(world, settings, monkeypatch):
    delivery = _webhook_delivery(world, settings)
    sends = []
    monkeypatch.setattr(notify.channels, "post_webhook", lambda *, url, message: sends.append(url))
    live = timezone.now() + timedelta(seconds=30)
    Delivery.objects.filter(pk=delivery.pk).update(attempts=1, claimed_until=live)  # another worker is sending

    assert notify.delivery_attempt(delivery_id=delivery.pk).claimed_until == live
    assert sends == [] and Delivery.objects.get().attempts == 1
    assert delivery.pk not in selectors.stale_pending(now=timezone.now())

    # That worker died mid-send: its claim expires, the scan finds the delivery and a new attempt sends it.
    Delivery.objects.filter(pk=delivery.pk).update(claimed_until=timezone.now() - timedelta(seconds=1))
    assert delivery.pk in selectors.stale_pending(now=timezone.now())
    done = notify.delivery_attempt(delivery_id=delivery.pk)
    assert len(sends) == 1
    assert (done.status, done.attempts, done.claimed_until) == ("delivered", 2, None)
    assert notify.delivery_attempt(delivery_id=delivery.pk).attempts == 2 and len(sends) == 1  # delivered: no more


def test_a_claim_taken_over_mid_send_leaves_the_failure_and_the_retry_to_the_newer_attempt(world, settings,
                                                                                          monkeypatch):
    delivery = _webhook_delivery(world, settings)
    newer = timezone.now() + timedelta(seconds=30)

    def slow_then_refused(*, url, message):  # outlives its claim: another worker takes the delivery over meanwhile
        Delivery.objects.filter(pk=delivery.pk).update(attempts=2, claimed_until=newer)
        raise notify.channels.SendError("webhook at hooks.test answered HTTP 500")

    monkeypatch.setattr(notify.channels, "post_webhook", slow_then_refused)
    late = notify.delivery_attempt(delivery_id=delivery.pk)  # no DeliveryFailed: not this attempt's retry
    assert (late.status, late.attempts, late.claimed_until, late.last_error) == ("pending", 2, newer, "")

    # A late success is recorded all the same (it was sent), and the newer attempt's failure cannot undo it.
    Delivery.objects.filter(pk=delivery.pk).update(attempts=1, claimed_until=timezone.now() - timedelta(seconds=1))
    monkeypatch.setattr(notify.channels, "post_webhook", lambda *, url, message: Delivery.objects.filter(
        pk=delivery.pk).update(attempts=3, claimed_until=newer))
    assert notify.delivery_attempt(delivery_id=delivery.pk).status == "delivered"
    assert notify._outcome_record(delivery_id=delivery.pk, attempt=3, error="HTTP 500").status == "delivered"
    assert Delivery.objects.get().claimed_until is None


def test_a_last_attempt_whose_worker_died_is_given_up_without_another_send(world, settings, monkeypatch):
    delivery = _webhook_delivery(world, settings)
    sends = []
    monkeypatch.setattr(notify.channels, "post_webhook", lambda *, url, message: sends.append(url))
    Delivery.objects.filter(pk=delivery.pk).update(status="retrying", attempts=notify.MAX_ATTEMPTS,
                                                   claimed_until=timezone.now() - timedelta(seconds=1))
    done = notify.delivery_attempt(delivery_id=delivery.pk)
    assert sends == [] and (done.status, done.attempts, done.claimed_until) == ("failed", notify.MAX_ATTEMPTS, None)
    assert done.last_error == f"attempt {notify.MAX_ATTEMPTS} never finished (its worker stopped mid-send)"
    assert delivery.pk not in selectors.stale_pending(now=timezone.now())


def test_a_claim_lasts_the_channels_timeout_and_a_margin(settings):
    settings.TIDAL_NOTIFY_WEBHOOK_TIMEOUT_S, settings.EMAIL_TIMEOUT = 5, 10
    assert notify._claim_length("webhook") == timedelta(seconds=5) + notify.CLAIM_MARGIN
    assert notify._claim_length("email") == timedelta(seconds=10) + notify.CLAIM_MARGIN
