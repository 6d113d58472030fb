"""Which decisions of the log are notifications (notifications/events.py), table by table; no database."""
import pytest

from notifications.events import (DEFAULT_EVENTS, USER_EVENTS, EventKind, job_event, job_id_of, job_message,
                                  unknown_events)


@pytest.mark.parametrize(("kind", "reason", "expected"), [
    ("admission", "admitted-own-quota", EventKind.ADMITTED),
    ("admission", "admitted-borrowed-quota", EventKind.ADMITTED),
    ("admission", "admitted", EventKind.ADMITTED),
    ("preemption", "preempted-reclaim", EventKind.PREEMPTED),
    ("preemption", "preempted-priority", EventKind.PREEMPTED),
    ("pending", "taken-back", EventKind.TAKEN_BACK),
    ("placement", "finished", EventKind.FINISHED),
    ("placement", "failed", EventKind.FAILED),
    # Requeues the scheduler retries at once, and every other decision: no event.
    ("pending", "evicted", None),
    ("pending", "pod-missing", None),
    ("pending", "bind-failed", None),
    ("pending", "worker-failed", None),
    ("pending", "submitted", None),
    ("pending", "quota-exhausted", None),
    ("cancellation", "cancelled_by_user", None),
    ("rightsizing", "request-kept", None),
    ("lending", "lent", None),
    ("placement", "bound", None),
    ("alert", "short", None),
])
def test_a_decision_is_the_event_its_kind_and_reason_say(kind, reason, expected):
    assert job_event(kind, reason) is expected


@pytest.mark.parametrize(("subject", "expected"), [
    ("job:42", 42), ("job:1", 1), ("node:n1", None), ("service:ranker", None), ("job:", None), ("job:4x", None),
    ("job:-3", None), ("", None), ("quota:ml-search", None),
])
def test_only_a_job_subject_names_a_job(subject, expected):
    assert job_id_of(subject) == expected


def test_unknown_events_are_named_with_the_choices():
    assert unknown_events(["preempted", "failed"], USER_EVENTS) == []
    problems = unknown_events(["preempted", "exploded", "quota_full"], USER_EVENTS)
    assert len(problems) == 2
    assert problems[0].startswith("unknown event 'exploded'; choose from admitted, preempted")
    assert "'quota_full'" in problems[1]  # a department event is not a user's


def test_the_defaults_are_events_a_user_may_choose():
    assert set(DEFAULT_EVENTS) <= set(USER_EVENTS)
    assert EventKind.ADMITTED not in DEFAULT_EVENTS


def test_a_webhook_body_is_slack_compatible_with_structured_fields():
    message = job_message(event=EventKind.PREEMPTED, job_id=7, job_name="resnet", department="ml-search",
                          sentence="preempted for job 9", at="2026-11-26T10:00:00+00:00", url="")
    body = message.webhook_body()
    assert body["text"] == "[Tidal] job 7 (resnet) preempted\npreempted for job 9"
    assert body["event"] == "preempted" and body["job"] == {"id": 7, "name": "resnet"}
    assert body["department"] == "ml-search"
