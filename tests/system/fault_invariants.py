"""What must hold after any fault (issue 14): no job lost or duplicated, no node left half-way, every decision
recorded once. Checked against the database and the cluster backend's own view, in this process or — for a test
whose code under test runs on a private database — in a subprocess (`python manage.py shell -c "...; main()"`)
that prints the findings as JSON."""
from __future__ import annotations

import json
from collections import Counter

from django.conf import settings
from redis import Redis

from cluster.backend import ClusterBackend
from cluster.simulated import store
from colocation.models import Node, NodeTransition
from core.models import Decision
from scheduler.models import JobRun, JobStatus, TrainingJob

HOLDING = (JobStatus.ADMITTED, JobStatus.RUNNING)


def violations(backend: ClusterBackend) -> list[str]:
    """Every broken invariant as a sentence; empty when all hold."""
    return _jobs(backend) + _nodes(backend) + _duplicate_decisions()


def _jobs(backend: ClusterBackend) -> list[str]:
    found = []
    training = {p.spec.name: p for p in backend.pods() if p.spec.job_id is not None}
    admissions = Counter(Decision.objects.filter(kind=Decision.Kind.ADMISSION).values_list("subject", flat=True))
    for job in TrainingJob.objects.prefetch_related("runs"):
        runs = list(job.runs.all())
        open_runs = [r for r in runs if r.ended_at is None]
        if len(open_runs) > 1:
            found.append(f"job {job.pk}: {len(open_runs)} open runs")
        if job.status in HOLDING and not (len(open_runs) == 1 and open_runs[0].pod in training):
            found.append(f"job {job.pk} is {job.status} but its pod is not on the cluster")
        if job.status not in HOLDING and open_runs:
            found.append(f"job {job.pk} is {job.status} with an open run")
        if admissions[f"job:{job.pk}"] != len(runs):
            found.append(f"job {job.pk}: {admissions[f'job:{job.pk}']} admission decisions for {len(runs)} runs")
    expected = set(JobRun.objects.filter(ended_at__isnull=True, job__status__in=HOLDING).values_list("pod", flat=True))
    found += [f"pod {name} runs for no admitted job" for name, pod in training.items()
              if name not in expected and not pod.terminating]
    return found


def _nodes(backend: ClusterBackend) -> list[str]:
    found = []
    database = dict(Node.objects.values_list("name", "state"))
    for node in backend.nodes():
        if database.get(node.name) != node.state.value:
            found.append(f"node {node.name}: the cluster says {node.state.value}, "
                         f"the database {database.get(node.name)}")
        if node.state.value.endswith("unnormal"):
            found.append(f"node {node.name} is left {node.state.value}")
    found += [f"node {name}: its {direction} is still open" for name, direction in
              NodeTransition.objects.filter(status=NodeTransition.Status.OPEN).values_list("node__name", "direction")]
    return found


def _duplicate_decisions() -> list[str]:
    """The same decision (kind, subject, reason, sentence and data) twice: an action recorded again after a fault.
    Alerts are the tests' to count."""
    rows = Counter((*row[:4], json.dumps(row[4], sort_keys=True)) for row in Decision.objects.exclude(
        kind=Decision.Kind.ALERT).values_list("kind", "subject", "reason", "message", "data"))
    return [f"decision recorded {n} times: {row}" for row, n in rows.items() if n > 1]


def decisions_about(subject: str) -> list[str]:
    return list(Decision.objects.filter(subject=subject).order_by("id").values_list("reason", flat=True))


def main() -> None:
    """For a subprocess on the private database: the findings on the live simulated cluster kept in Redis."""
    backend = store.load(Redis.from_url(settings.REDIS_URL), settings.TIDAL_REDIS_NAMESPACE)
    print(json.dumps({
        "violations": violations(backend),
        "jobs": {str(j.pk): [j.status, j.pool_preference, [r.outcome for r in j.runs.order_by("attempt")]]
                 for j in TrainingJob.objects.all()},
        "decisions": {s: decisions_about(s) for s in Decision.objects.values_list("subject", flat=True).distinct()},
    }))
