"""Writes of the notifications app (docs/concepts/notifications.md#how-it-works): preferences and subscriptions, the
scan that turns the
decision log and the queue into events and deliveries, and one delivery attempt."""
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.urls import reverse
from django.utils import timezone

from core.errors import ApplicationError
from core.models import CPU, MEMORY, Decision, Department
from notifications import channels, selectors
from notifications.events import (DEPARTMENT_EVENTS, USER_EVENTS, EventKind, Message, alert_message,
                                  department_message, job_event, job_id_of, job_message, unknown_events)
from notifications.models import (Channel, DepartmentSubscription, Delivery, Episode, Event, Preference,
                                  ScanCursor)
from scheduler import selectors as scheduler_selectors
from scheduler.models import JobStatus, TrainingJob
from scheduler.submission import amount_text

log = logging.getLogger(__name__)
CURSOR = "decisions"
BATCH = 1000  # decisions per scan; the next scan goes on from the cursor
MAX_ATTEMPTS = 6  # the first try and five retries with exponential backoff (notifications/tasks.py)
MAX_WAITING_HOURS = 24 * 30
FAILURE_WINDOW = timedelta(hours=1)
CLAIM_MARGIN = timedelta(seconds=60)  # beyond the channel's timeout, which bounds each socket operation, not a send


class DeliveryFailed(Exception):
    """An attempt failed and another is due: the task retries with backoff."""


# --- preferences and subscriptions ---------------------------------------------------------------------------------

def _choice_errors(*, events: list, allowed: tuple[EventKind, ...], webhook_url: str) -> dict[str, list[str]]:
    errors = {}
    if problems := unknown_events(events, allowed):
        errors["events"] = problems
    if problems := channels.webhook_url_errors(webhook_url):
        errors["webhook_url"] = problems
    return errors


def _unique(events: list[str]) -> list[str]:
    return list(dict.fromkeys(events))


@transaction.atomic
def preference_set(*, user, events: list[str], waiting_hours: int, email: bool, webhook_url: str,
                   email_address: str | None = None) -> Preference:
    """Which of their jobs' events reach the user, and how, with the address their e-mail goes to (None: unchanged;
    it serves their department subscriptions too); refused with every field's reason, nothing written."""
    errors = _choice_errors(events=events, allowed=USER_EVENTS, webhook_url=webhook_url)
    if not 1 <= waiting_hours <= MAX_WAITING_HOURS:
        errors["waiting_hours"] = [f"must be a whole number of hours from 1 to {MAX_WAITING_HOURS}"]
    address = None if email_address is None else email_address.strip()
    if address is not None and (problems := channels.address_errors(address)):
        errors["email_address"] = problems
    if errors:
        raise ApplicationError("the notification settings were not saved", fields=errors)
    if address is not None and address != user.email:
        user.email = address
        user.save(update_fields=["email"])
    preference, _ = Preference.objects.update_or_create(user=user, defaults={
        "events": _unique(events), "waiting_hours": waiting_hours, "email": email, "webhook_url": webhook_url})
    return preference


@transaction.atomic
def subscription_set(*, user, department: Department, events: list[str], email: bool,
                     webhook_url: str) -> DepartmentSubscription:
    """A department admin's (or an operator's) subscription to the department's events, created or replaced."""
    errors = _choice_errors(events=events, allowed=DEPARTMENT_EVENTS, webhook_url=webhook_url)
    if not selectors.administered_departments(user=user).filter(pk=department.pk).exists():
        errors["department"] = [f"only admins of {department} and operators subscribe to its events"]
    if errors:
        raise ApplicationError("the subscription was not saved", fields=errors)
    subscription, _ = DepartmentSubscription.objects.update_or_create(user=user, department=department, defaults={
        "events": _unique(events), "email": email, "webhook_url": webhook_url})
    return subscription


def subscription_delete(*, subscription: DepartmentSubscription) -> None:
    subscription.delete()


# --- the scan: decisions, long waits and department episodes become events -----------------------------------------

@dataclass(frozen=True)
class Receiver:
    user: object  # None: the operators (their alert webhook)
    channel: str
    target: str


def _receivers(user, events: list[str], email: bool, webhook_url: str, kind: EventKind) -> list[Receiver]:
    if kind.value not in events:
        return []
    found = [Receiver(user, Channel.EMAIL, user.email)] if email and user.email else []
    return found + ([Receiver(user, Channel.WEBHOOK, webhook_url)] if webhook_url else [])


def _link(path: str) -> str:
    return f"{settings.TIDAL_PUBLIC_URL.rstrip('/')}{path}" if settings.TIDAL_PUBLIC_URL else ""


def _notify(*, kind: EventKind, key: str, receivers: list[Receiver], message: Message,
            department: Department | None, job: TrainingJob | None = None,
            decision: Decision | None = None) -> list[int]:
    """The event once (by `key`) with one delivery per receiver and channel; the new deliveries' ids."""
    if not receivers:
        return []  # nobody asked: no event (a later scan finds nothing new to say either)
    event, created = Event.objects.get_or_create(key=key, defaults={
        "kind": kind.value, "department": department, "job": job, "decision": decision,
        "subject": message.subject, "body": message.body, "fields": message.fields})
    made = []
    for receiver in dict.fromkeys(receivers):  # the same address through a preference and a subscription: once
        delivery, new = Delivery.objects.get_or_create(event=event, user=receiver.user, channel=receiver.channel,
                                                       target=receiver.target)
        if new:
            made.append(delivery.pk)
    return made


class _Subscribers:
    """Department subscriptions whose users still administer the department (or are operators)."""

    def __init__(self, department_ids: set[int]):
        subscriptions = list(selectors.subscriptions().filter(department_id__in=department_ids))
        admins = selectors.admin_pairs(department_ids=department_ids)
        self.by_department: dict[int, list[DepartmentSubscription]] = {}
        for s in subscriptions:
            if s.user.is_active and (s.user.is_staff or (s.user_id, s.department_id) in admins):
                self.by_department.setdefault(s.department_id, []).append(s)

    def receivers(self, department_id: int, kind: EventKind) -> list[Receiver]:
        return [r for s in self.by_department.get(department_id, [])
                for r in _receivers(s.user, s.events, s.email, s.webhook_url, kind)]


def notifications_scan(*, now: datetime) -> list[int]:
    """Everything new to tell since the last scan, as deliveries (their ids, for the caller to send). The cursor,
    the events and the deliveries commit together; events and deliveries are unique in the database, so a scan run
    twice tells nothing twice."""
    with transaction.atomic():
        ScanCursor.objects.get_or_create(name=CURSOR)
        cursor = ScanCursor.objects.select_for_update().get(name=CURSOR)  # one scan at a time
        made = _decisions(cursor, now)
        made += _waiting_long(now)
        made += _department_episodes(now)
    return made


def _decisions(cursor: ScanCursor, now: datetime) -> list[int]:
    settled = now - timedelta(seconds=settings.TIDAL_NOTIFY_SETTLE_S)
    decisions = list(Decision.objects.filter(pk__gt=cursor.last_decision_id, created_at__lte=settled)
                     .select_related("department").order_by("pk")[:BATCH])
    if not decisions:
        return []
    cursor.last_decision_id = decisions[-1].pk
    cursor.save(update_fields=["last_decision_id", "updated_at"])
    return _job_events(decisions) + _alerts([d for d in decisions if d.kind == Decision.Kind.ALERT])


def _job_events(decisions: list[Decision]) -> list[int]:
    """A job's decision that is an event reaches its submitter and its department's subscribers, as they asked."""
    found = [(d, kind, job_id) for d in decisions
             if (kind := job_event(d.kind, d.reason)) and (job_id := job_id_of(d.subject)) is not None]
    jobs = TrainingJob.objects.select_related("department", "submitter").in_bulk([j for _, _, j in found])
    preferences = {p.user_id: p for p in Preference.objects.filter(user_id__in={j.submitter_id for j in jobs.values()})}
    subscribers = _Subscribers({j.department_id for j in jobs.values()})
    made = []
    for decision, kind, job_id in found:
        if (job := jobs.get(job_id)) is None:
            continue
        p = preferences.get(job.submitter_id) or Preference(user=job.submitter)
        receivers = _receivers(job.submitter, p.events, p.email, p.webhook_url, kind) if job.submitter.is_active else []
        receivers += subscribers.receivers(job.department_id, kind)
        message = job_message(event=kind, job_id=job.pk, job_name=job.name, department=job.department.name,
                              sentence=decision.message, at=decision.created_at.isoformat(),
                              url=_link(reverse("job", args=[job.pk])))
        made += _notify(kind=kind, key=f"decision:{decision.pk}", receivers=receivers, message=message,
                        department=job.department, job=job, decision=decision)
    return made


def _alerts(decisions: list[Decision]) -> list[int]:
    """Every alert (a service short, capped or failing to scale: colocation/alerts.py; a loop or the cluster:
    colocation/live_backend.py) reaches the operators' webhook, TIDAL_ALERT_WEBHOOK_URL, and its department's
    subscribers to alerts."""
    if not decisions:
        return []
    url = settings.TIDAL_ALERT_WEBHOOK_URL
    operators = [Receiver(None, Channel.WEBHOOK, url)] if url else []
    subscribers = _Subscribers({d.department_id for d in decisions if d.department_id})
    made = []
    for d in decisions:
        receivers = operators + (subscribers.receivers(d.department_id, EventKind.ALERT) if d.department_id else [])
        message = alert_message(subject=d.subject, reason=d.reason, department=d.department and d.department.name,
                                sentence=d.message, data=d.data, at=d.created_at.isoformat())
        made += _notify(kind=EventKind.ALERT, key=f"decision:{d.pk}", receivers=receivers, message=message,
                        department=d.department, decision=d)
    return made


def _waiting_long(now: datetime) -> list[int]:
    """Pending jobs whose submitter asked to hear after N hours: once per pending period, which begins at submission
    and again at each requeue (the end of its latest run), so a job preempted and waiting again is told again."""
    wanting = {p.user_id: p for p in Preference.objects.select_related("user").filter(user__is_active=True)
               if EventKind.WAITING_LONG.value in p.events}
    if not wanting:
        return []
    shortest = min(p.waiting_hours for p in wanting.values())
    jobs = (TrainingJob.objects.filter(status=JobStatus.PENDING, submitter_id__in=wanting,
                                       submitted_at__lte=now - timedelta(hours=shortest))
            .annotate(last_end=Max("runs__ended_at")).select_related("department"))
    due = {}
    for job in jobs:
        since = max(job.submitted_at, job.last_end or job.submitted_at)
        if now - since >= timedelta(hours=wanting[job.submitter_id].waiting_hours):
            due[f"waiting_long:{job.pk}:{int(since.timestamp())}"] = (job, since)
    told = set(Event.objects.filter(key__in=due).values_list("key", flat=True))
    made = []
    for key, (job, since) in due.items():
        if key in told:
            continue
        p = wanting[job.submitter_id]
        waited = now - since
        latest = scheduler_selectors.latest_decision(job=job)
        place = f"; queue position {job.queue_position}" if job.queue_position else ""
        why = f": {latest.message}" if latest is not None else ""
        sentence = (f"still waiting after {int(waited.total_seconds() // 3600)} h "
                    f"{int(waited.total_seconds() % 3600 // 60)} min{place}{why}")
        message = job_message(event=EventKind.WAITING_LONG, job_id=job.pk, job_name=job.name,
                              department=job.department.name, sentence=sentence, at=now.isoformat(),
                              url=_link(reverse("job", args=[job.pk])))
        made += _notify(kind=EventKind.WAITING_LONG, key=key, message=message, department=job.department, job=job,
                        receivers=_receivers(p.user, p.events, p.email, p.webhook_url, EventKind.WAITING_LONG))
    return made


def _department_conditions(now: datetime) -> dict[tuple[int, str, str], str]:
    """What holds now: (department id, kind, resource) -> the sentence. A GPU quota is full when its own and borrowed
    amounts are both used; jobs fail repeatedly when TIDAL_NOTIFY_FAILURES of them failed within the last hour."""
    departments = {d.name: d for d in Department.objects.all()}
    found = {}
    usages = scheduler_selectors.quota_usages(departments=Department.objects.all())
    for name, quotas in usages.items():
        for q in quotas:
            total, used = q.own + q.borrowed, q.own_used + q.borrowed_used
            if q.resource not in (CPU, MEMORY) and total > 0 and used >= total:
                found[(departments[name].pk, EventKind.QUOTA_FULL.value, q.resource)] = (
                    f"{name}'s {q.resource} GPU quota is fully used: "
                    f"own {amount_text(q.own_used)}/{amount_text(q.own)}, "
                    f"borrowed {amount_text(q.borrowed_used)}/{amount_text(q.borrowed)}; new {q.resource} jobs wait")
    failed = (TrainingJob.objects.filter(status=JobStatus.FAILED, finished_at__gte=now - FAILURE_WINDOW)
              .values_list("department_id", "pk").order_by("pk"))
    by_department: dict[int, list[int]] = {}
    for department_id, job_id in failed:
        by_department.setdefault(department_id, []).append(job_id)
    names = {d.pk: d.name for d in departments.values()}
    for department_id, ids in by_department.items():
        if len(ids) >= settings.TIDAL_NOTIFY_FAILURES:
            shown = ", ".join(str(i) for i in ids[-10:])
            found[(department_id, EventKind.FAILING_REPEATEDLY.value, "")] = (
                f"{len(ids)} jobs of {names[department_id]} failed in the last hour (jobs {shown})")
    return found


def _department_episodes(now: datetime) -> list[int]:
    """Open an episode (and notify its subscribers) when a condition begins; close it when it clears."""
    current = _department_conditions(now)
    open_episodes = {(e.department_id, e.kind, e.resource): e
                     for e in Episode.objects.filter(closed_at__isnull=True)}
    for key, episode in open_episodes.items():
        if key not in current:
            episode.closed_at = now
            episode.save(update_fields=["closed_at"])
    began = [key for key in current if key not in open_episodes]
    if not began:
        return []
    departments = Department.objects.in_bulk({d for d, _, _ in began})
    subscribers = _Subscribers(set(departments))
    made = []
    for department_id, kind_name, resource in began:
        episode = Episode.objects.create(department_id=department_id, kind=kind_name, resource=resource, opened_at=now)
        kind, department = EventKind(kind_name), departments[department_id]
        message = department_message(event=kind, department=department.name, at=now.isoformat(),
                                     sentence=current[(department_id, kind_name, resource)],
                                     url=_link(reverse("department", args=[department.name])))
        made += _notify(kind=kind, key=f"episode:{episode.pk}", message=message, department=department,
                        receivers=subscribers.receivers(department_id, kind))
    return made


# --- one delivery attempt --------------------------------------------------------------------------------------------

def delivery_attempt(*, delivery_id: int) -> Delivery | None:
    """Send one delivery unless it was delivered already or another worker's claim on it is live. The claim commits
    before the send and the outcome after it: no transaction or row lock is held while a slow server answers, two
    workers never both send while a claim is live, and a worker that dies mid-send leaves a claim that expires, so a
    later attempt sends again (at least once, never lost). Raises DeliveryFailed, after recording, when a retry is
    due."""
    claimed, ours = _delivery_claim(delivery_id=delivery_id, now=timezone.now())
    if not ours:
        return claimed  # gone, settled, or another worker's to send
    delivery = _outcome_record(delivery_id=delivery_id, attempt=claimed.attempts, error=_send(claimed))
    if delivery is None or delivery.attempts != claimed.attempts:
        return delivery  # our claim expired and a newer attempt took it over: that attempt follows up
    if delivery.status == Delivery.Status.RETRYING:
        raise DeliveryFailed(f"delivery {delivery.pk}, attempt {delivery.attempts}: {delivery.last_error}")
    if delivery.status == Delivery.Status.FAILED:
        log.warning("delivery %s failed for good after %s attempts: %s", delivery.pk, delivery.attempts,
                    delivery.last_error)
    return delivery


def _claim_length(channel: str) -> timedelta:
    """How long a claim keeps other workers off: the channel's timeout, read as channels.py reads it (Django's
    EMAIL_TIMEOUT may be None: no timeout), and a margin."""
    timeout = settings.EMAIL_TIMEOUT if channel == Channel.EMAIL else settings.TIDAL_NOTIFY_WEBHOOK_TIMEOUT_S
    return timedelta(seconds=timeout or 0) + CLAIM_MARGIN


def _delivery_claim(*, delivery_id: int, now: datetime) -> tuple[Delivery | None, bool]:
    """The delivery and whether this worker now holds its claim (the row is locked only for this short
    transaction); unchanged when it is settled or another worker's claim is live."""
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().filter(pk=delivery_id).first()
        if delivery is None or delivery.status in (Delivery.Status.DELIVERED, Delivery.Status.FAILED):
            return delivery, False
        if delivery.claimed_until is not None and delivery.claimed_until > now:
            return delivery, False  # another worker is sending it: its outcome, or its claim's expiry, comes next
        if delivery.attempts >= MAX_ATTEMPTS:  # the last attempt's worker died mid-send: given up, as if it failed
            delivery.status, delivery.claimed_until = Delivery.Status.FAILED, None
            delivery.last_error = f"attempt {delivery.attempts} never finished (its worker stopped mid-send)"
            delivery.save(update_fields=["status", "last_error", "claimed_until", "updated_at"])
            log.warning("delivery %s failed for good: %s", delivery.pk, delivery.last_error)
            return delivery, False
        delivery.attempts += 1
        delivery.claimed_until = now + _claim_length(delivery.channel)
        delivery.save(update_fields=["attempts", "claimed_until", "updated_at"])
    return delivery, True


def _send(delivery: Delivery) -> str | None:
    """One send, outside any transaction: why it failed, or None when it went out."""
    event = delivery.event
    message = Message(subject=event.subject, body=event.body, fields=event.fields)
    try:
        if delivery.channel == Channel.EMAIL:
            channels.send_email(to=delivery.target, message=message)
        else:
            channels.post_webhook(url=delivery.target, message=message)
    except channels.SendError as error:
        return str(error)[:2000]
    return None


def _outcome_record(*, delivery_id: int, attempt: int, error: str | None) -> Delivery | None:
    """Record attempt number `attempt`'s outcome and release its claim. A delivery stays delivered; if the claim
    expired and a newer attempt took it over, only a success is recorded (the newer attempt owns the rest)."""
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().filter(pk=delivery_id).first()
        if delivery is None:
            return None
        ours = delivery.attempts == attempt
        if delivery.status != Delivery.Status.DELIVERED and error is None:
            delivery.status, delivery.delivered_at, delivery.last_error = Delivery.Status.DELIVERED, timezone.now(), ""
        elif delivery.status != Delivery.Status.DELIVERED and ours:
            delivery.last_error = error
            delivery.status = Delivery.Status.RETRYING if delivery.attempts < MAX_ATTEMPTS else Delivery.Status.FAILED
        if ours:
            delivery.claimed_until = None
        delivery.save(update_fields=["status", "last_error", "delivered_at", "claimed_until", "updated_at"])
    return delivery
