"""`bench console`: how fast every console page renders with 10,000 jobs and 200 departments, the leaves of a
3-level quota tree (4 divisions of 10 groups each; docs/concepts/quotas-and-priority.md#quota-trees-and-fair-sharing).

It builds its own throwaway database (Django's test database next to the configured one, migrated, dropped at
the end), so it runs on a fresh clone and never touches real data. Each page is requested through the whole
Django stack in-process (middleware, session, templates; no network) and timed with perf_counter; Django's
test environment is not set up, so templates render as in production (no test instrumentation)."""
from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_databases, teardown_databases
from django.urls import reverse
from django.utils import timezone

PAGES = ("my_jobs", "department_jobs", "all_jobs_operator", "job_pending", "job_running", "submit",
         "departments_operator", "department", "quota_tree_operator", "quota_tree_admin", "services", "service",
         "ops_overview", "ops_nodes", "ops_quotas", "ops_decisions")
STATUSES = (("pending", 0.3), ("running", 0.2), ("succeeded", 0.4), ("cancelled", 0.05), ("failed", 0.05))


def bench_console(*, jobs: int, departments: int, nodes: int, repeat: int, seed: int = 7,
                  progress: Callable[[str], None] = lambda _page: None) -> dict:
    old = setup_databases(verbosity=0, interactive=False)
    try:
        pages = _fill(jobs=jobs, departments=departments, nodes=nodes, rng=random.Random(seed))
        figures: dict[str, float | int] = {"jobs": jobs, "departments": departments, "nodes": nodes,
                                           "repeat": repeat}
        for name, (user, url) in pages.items():
            client = Client()
            client.force_login(user)
            assert client.get(url).status_code == 200, f"{name}: {url} did not render"  # warm-up
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                client.get(url)
                times.append((time.perf_counter() - start) * 1000)
            figures[f"{name}_p50_ms"] = round(statistics.median(times), 1)
            figures[f"{name}_p95_ms"] = round(_p95(times), 1)
            progress(name)
        return figures
    finally:
        teardown_databases(old, verbosity=0)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def _fill(*, jobs: int, departments: int, nodes: int, rng: random.Random) -> dict[str, tuple]:
    """A cluster's worth of rows; returns the pages to time as name -> (user, url)."""
    from colocation.models import InferenceService, Node, NodeState, ResourceGroup, ScalingThreshold
    from core.models import Decision, Department, GPUModel, Membership
    from scheduler.models import Framework, JobRun, Quota, TrainingJob

    User = get_user_model()
    operator = User.objects.create_user("bench-operator", is_staff=True)
    t4 = GPUModel.objects.create(name="T4", memory_gib=16)
    framework = Framework.objects.create(name="pytorch", version="2.1")
    framework.certified_on.set([t4])
    group = ResourceGroup.objects.create(name="t4", hardware_class="T4", gpu_model=t4)
    inventory = Node.objects.bulk_create(
        Node(name=f"t4-{i}", resource_group=group, gpu_model=t4, gpu_count=8, cpu_milli=96000, memory_mib=786432,
             state=rng.choice([NodeState.OFFLINE_NORMAL, NodeState.ONLINE_NORMAL])) for i in range(nodes))
    _transitions(inventory, rng)
    divisions = Department.objects.bulk_create(Department(name=f"div-{d}", weight=1 + d % 2) for d in range(4))
    groups = Department.objects.bulk_create(Department(name=f"grp-{d}-{g}", parent=divisions[d])
                                            for d in range(4) for g in range(10))
    depts = Department.objects.bulk_create(Department(name=f"dept-{i:03d}", parent=groups[i % len(groups)],
                                                      weight=1 + i % 3) for i in range(departments))
    users = User.objects.bulk_create(User(username=f"user-{i:03d}") for i in range(departments))
    Membership.objects.bulk_create(Membership(user=u, department=d, role="admin") for u, d in zip(users, depts))
    quotas = []
    for d in depts:
        quotas += [Quota(department=d, resource_kind="gpu", gpu_model=t4, own=16, borrowed=8),
                   Quota(department=d, resource_kind="cpu", own=256000, borrowed=64000),
                   Quota(department=d, resource_kind="memory", own=2097152, borrowed=524288)]
    quotas += [Quota(department=d, resource_kind="gpu", gpu_model=t4, own=64, borrowed=0, lend_limit=32)
               for d in divisions]  # a pool each division's teams share
    Quota.objects.bulk_create(quotas)
    now = timezone.now()
    rows = []
    for i in range(jobs):
        status = rng.choices([s for s, _ in STATUSES], [w for _, w in STATUSES])[0]
        dept_index = rng.randrange(departments)
        rows.append(TrainingJob(
            name=f"job-{i}", task_key=f"task-{i % 500}", department=depts[dept_index], submitter=users[dept_index],
            image="registry.local/bench:1", command="python train.py", framework=framework, gpu_model=t4,
            gpus=Decimal(rng.choice(["0.5", "1", "2"])), cpu_milli=4000, memory_mib=16384, status=status,
            queue_position=i + 1 if status == "pending" else None, pending_reason="quota-exhausted" if status == "pending" else "",
            score={"base": 1000000, "utilization": 0, "aging": 3, "total": 1000003},
            node=rng.choice(inventory) if status == "running" else None,
            assigned_gpu_model=t4 if status == "running" else None, quota_kind="own" if status == "running" else ""))
    created = TrainingJob.objects.bulk_create(rows, batch_size=2000)
    TrainingJob.objects.update(submitted_at=now - timedelta(hours=2))
    JobRun.objects.bulk_create((JobRun(job=j, attempt=1, node=j.node, gpu_model=t4, pod=f"job-{j.pk}-1", started_at=now)
                                for j in created if j.status == "running"), batch_size=2000)
    Decision.objects.bulk_create((Decision(kind="pending", subject=f"job:{j.pk}", department=j.department,
                                           reason="quota-exhausted", message="pending: own T4 quota 16/16 used, needs 1")
                                  for j in created for _ in range(2)), batch_size=4000)
    pending = TrainingJob.objects.filter(status="pending").select_related("submitter", "department").first()
    running = TrainingJob.objects.filter(status="running").first()
    admin, dept = pending.submitter, pending.department
    service = InferenceService.objects.create(name="ranker", department=dept, gpu_model=t4)
    ScalingThreshold.objects.create(service=service, metric="gpu", min_rate=0.2, expect_rate=0.5, max_rate=0.8)
    pages = {
        "my_jobs": (admin, reverse("jobs")),
        "department_jobs": (admin, reverse("jobs") + "?scope=departments&status=pending"),
        "all_jobs_operator": (operator, reverse("jobs") + "?scope=departments"),
        "job_pending": (admin, reverse("job", args=[pending.pk])),
        "job_running": (operator, reverse("job", args=[running.pk])),
        "submit": (admin, reverse("job-submit")),
        "departments_operator": (operator, reverse("departments")),
        "department": (admin, reverse("department", args=[dept.name])),
        "quota_tree_operator": (operator, reverse("department-tree")),
        "quota_tree_admin": (admin, reverse("department-tree")),
        "services": (admin, reverse("services")),
        "service": (admin, reverse("service", args=[service.name])),
        "ops_overview": (operator, reverse("ops")),
        "ops_nodes": (operator, reverse("ops-nodes") + f"?node={inventory[0].name}"),
        "ops_quotas": (operator, reverse("ops-quotas")),
        "ops_decisions": (operator, reverse("ops-decisions") + "?q=quota"),
    }
    assert tuple(pages) == PAGES
    return pages


def _transitions(inventory: list, rng: random.Random) -> None:
    """An hour of lending: 100 finished transitions and 5 open ones, for the nodes page's timeline."""
    from colocation.models import Direction, NodeTransition

    now = timezone.now()
    records = NodeTransition.objects.bulk_create(
        NodeTransition(node=node, direction=rng.choice(Direction.values), reason="bench", message="bench",
                       step="done" if i >= 5 else "drain", status="done" if i >= 5 else "open")
        for i, node in enumerate(rng.sample(inventory, min(105, len(inventory)))))
    for i, record in enumerate(records):
        started = now - timedelta(minutes=rng.randrange(1, 59))
        NodeTransition.objects.filter(pk=record.pk).update(
            started_at=started, finished_at=None if i < 5 else started + timedelta(seconds=rng.randrange(20, 300)))
