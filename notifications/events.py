"""What a notification is about, decided from the decision log (docs/concepts/notifications.md#events-and-channels).
Pure: no Django, so the
mapping is tested table by table without a database."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class EventKind(str, Enum):
    ADMITTED = "admitted"
    PREEMPTED = "preempted"
    TAKEN_BACK = "taken_back"
    FINISHED = "finished"
    FAILED = "failed"
    WAITING_LONG = "waiting_long"
    QUOTA_FULL = "quota_full"
    FAILING_REPEATEDLY = "failing_repeatedly"
    ALERT = "alert"  # a Decision of kind alert: a service short, capped or failing to scale; a loop; the cluster

    @property
    def label(self) -> str:
        return LABELS[self]


LABELS = {
    EventKind.ADMITTED: "admitted",
    EventKind.PREEMPTED: "preempted",
    EventKind.TAKEN_BACK: "killed by a take-back",
    EventKind.FINISHED: "finished",
    EventKind.FAILED: "failed",
    EventKind.WAITING_LONG: "still waiting after N hours",
    EventKind.QUOTA_FULL: "department quota full",
    EventKind.FAILING_REPEATEDLY: "department jobs failing repeatedly",
    EventKind.ALERT: "alert about a department service",
}
# What a user may ask about their own jobs, and what a department admin may subscribe to for the department.
USER_EVENTS = (EventKind.ADMITTED, EventKind.PREEMPTED, EventKind.TAKEN_BACK, EventKind.FINISHED, EventKind.FAILED,
               EventKind.WAITING_LONG)
DEPARTMENT_EVENTS = (EventKind.ADMITTED, EventKind.PREEMPTED, EventKind.TAKEN_BACK, EventKind.FINISHED,
                     EventKind.FAILED, EventKind.QUOTA_FULL, EventKind.FAILING_REPEATEDLY, EventKind.ALERT)
# The defaults: what costs a user work (their job lost its GPUs or died), by e-mail; nothing by webhook.
DEFAULT_EVENTS = (EventKind.PREEMPTED, EventKind.TAKEN_BACK, EventKind.FAILED)
DEFAULT_DEPARTMENT_EVENTS = (EventKind.QUOTA_FULL, EventKind.FAILING_REPEATEDLY)
DEFAULT_WAITING_HOURS = 6


def job_event(kind: str, reason: str) -> EventKind | None:
    """The event a job's decision is, if any. The lifecycle writes (scheduler/lifecycle.py): job_admit an
    `admission`; job_requeue a `preemption` for a preempted run, else a `pending` with its reason (`taken-back` from
    job_take_back); job_finish a `placement` with reason `finished` or `failed`. Other requeues (evicted by someone
    else, a missing pod, a failed bind or gang worker) are retried by the scheduler at once and are not events."""
    if kind == "admission":
        return EventKind.ADMITTED
    if kind == "preemption":
        return EventKind.PREEMPTED
    if kind == "pending" and reason == "taken-back":
        return EventKind.TAKEN_BACK
    if kind == "placement" and reason == "finished":
        return EventKind.FINISHED
    if kind == "placement" and reason == "failed":
        return EventKind.FAILED
    return None


def job_id_of(subject: str) -> int | None:
    """42 for "job:42"; None for any other subject."""
    prefix, _, rest = subject.partition(":")
    return int(rest) if prefix == "job" and rest.isdigit() else None


def unknown_events(names: list, allowed: tuple[EventKind, ...]) -> list[str]:
    """The names in `names` that are not among `allowed`, as messages."""
    choices = ", ".join(e.value for e in allowed)
    return [f"unknown event {name!r}; choose from {choices}" for name in names
            if name not in {e.value for e in allowed}]


@dataclass(frozen=True)
class Message:
    """One notification as every channel renders it: a subject line, a text body and structured fields."""

    subject: str
    body: str
    fields: dict

    def webhook_body(self) -> dict:
        """Slack-compatible (`text`), with the structured fields beside it for other receivers."""
        return {"text": f"{self.subject}\n{self.body}", **self.fields}


def job_message(*, event: EventKind, job_id: int, job_name: str, department: str, sentence: str, at: str,
                url: str) -> Message:
    subject = f"[Tidal] job {job_id} ({job_name}) {event.label.replace('N hours', 'hours')}"
    link = f"\n{url}" if url else ""
    return Message(subject=subject, body=f"{sentence}{link}",
                   fields={"event": event.value, "job": {"id": job_id, "name": job_name}, "department": department,
                           "message": sentence, "at": at, "url": url})


def alert_message(*, subject: str, reason: str, department: str | None, sentence: str, data: dict, at: str
                  ) -> Message:
    """An alert as the operators' webhook (TIDAL_ALERT_WEBHOOK_URL) and department subscribers receive it: what it is
    about (`service` for a service's), its reason and sentence, and the decision's data beside them."""
    about, _, name = subject.partition(":")
    fields = {**data, "event": EventKind.ALERT.value, "subject": subject, "reason": reason, "department": department,
              "message": sentence, "at": at}
    if about == "service":
        fields["service"] = name
    return Message(subject=f"[Tidal] alert: {sentence}", body=sentence, fields=fields)


def department_message(*, event: EventKind, department: str, sentence: str, at: str, url: str) -> Message:
    link = f"\n{url}" if url else ""
    return Message(subject=f"[Tidal] {department}: {event.label}", body=f"{sentence}{link}",
                   fields={"event": event.value, "department": department, "message": sentence, "at": at, "url": url})
