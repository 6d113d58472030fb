"""The demo's workload: training jobs drawn from the Alibaba 2023 pod list, submitted on a sped-up clock.

Mapping (the trace has no departments, frameworks or GPU models for its pods):
- department: a stable hash of the pod name picks one of the demo departments;
- submitter: a member of that department, else the operator;
- GPUs: `num_gpu` whole GPUs, or `gpu_milli / 1000` of one GPU; GPU model: the hash picks one of the models
  the cluster has; framework pytorch-2.1 (certified on every demo model);
- simulated run time: (deletion − scheduled) / speed-up, kept within [2 min, 2 h]; pods that never ran: 5 min
  (cluster.simulated.traces.demo_run_s, which replay --demo uses too);
- gangs: pods of whole GPUs become gangs of 2-16 workers of the pod's shape (cluster.simulated.traces.gang_plan,
  the rule replay's --gangs uses too) until gangs hold the share of GPU-time that jobs of >= 8 GPUs hold in Helios
  (`running_gpu_num_noless_8`); a gang has at most the workers its model's nodes and its department's quota could
  ever hold (else it runs alone);
- arrivals: from TIDAL_DEMO_TRACE_START_S on (day 120, where the trace is dense), inter-arrival times divided
  by speed-up × load factor: the demo cluster holds 1 node in 10 and the trace alone would never contend it; and
  multiplied by the gangs' growth of the offered GPU-time, so the gangs change its shape, not its GPU load.
"""
import itertools
import math
import time
import zlib
from functools import lru_cache
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model

from cluster.backend import RUNTIME_LABEL
from cluster.simulated import alibaba
from cluster.simulated.alibaba import PodRow
from cluster.simulated.traces import GANG_WORKERS, GangPlan, demo_run_s, gang_plan, gang_share, workers_room
from colocation.models import Node
from core.errors import ApplicationError
from core.models import CPU, MEMORY, Department, GPUModel, Membership
from scheduler import selectors, submission
from scheduler.models import Framework

POD_LIST = "alibaba-gpu-2023/openb_pod_list_default.csv"
STATE_KEY = "demo-workload"  # Redis hash under the instance's namespace: started_at, next row


@lru_cache(maxsize=2)
def read_pods(path: Path) -> tuple[PodRow, ...]:
    """The validated pod list (cluster/simulated/alibaba.py), read once per file."""
    return alibaba.read_pods(path).pods


@lru_cache(maxsize=2)
def demo_gangs(path: Path, speedup: float, helios_dir: Path) -> GangPlan:
    """Which pods of the list run as gangs, on the demo's run times (computed once per file)."""
    share, _ = gang_share(helios_dir)
    return gang_plan(read_pods(path), share, lambda pod: demo_run_s(pod, speedup))


def gang_workers(pod: PodRow, planned: int, department: Department, gpu_model: GPUModel | None) -> int:
    """The planned workers, at most what the model's nodes could ever hold, and what one kind of the department's
    quota could (a gang takes all it asks from its own quota or all from borrowed: scheduler.policy.quota); below
    two, the pod runs alone."""
    if planned < GANG_WORKERS[0] or gpu_model is None:
        return 1
    nodes = Node.objects.filter(gpu_model=gpu_model)  # sizes are what workers_room reads
    asks = {gpu_model.name: Decimal(str(pod.gpus)), CPU: Decimal(pod.cpu_milli), MEMORY: Decimal(pod.memory_mib)}
    workers = min(planned, workers_room(pod.gpus, pod.cpu_milli, pod.memory_mib, nodes),
                  _quota_room(selectors.quota_limits(department=department), asks, gpu_model.name))
    return workers if workers >= GANG_WORKERS[0] else 1


def _quota_room(limits: dict[str, tuple[Decimal, Decimal]], asks: dict[str, Decimal], model: str) -> float:
    """Workers one kind of quota (own, or borrowed) holds whole; a model without a quota holds none, a resource
    without one (or not asked for) does not limit."""
    if model not in limits:
        return 0
    return max(min(math.floor(limits[r][kind] / need) if r in limits and need else math.inf
                   for r, need in asks.items()) for kind in (0, 1))


def _pick(name: str, options: list):
    return options[zlib.crc32(name.encode()) % len(options)]


def task_key(pod: PodRow, department: str) -> str:
    """The trace has no notion of a recurring job: pods of one department with the same request shape and
    QoS count as runs of one task (8,152 pods have 162 shapes), so profiles build up a history in the demo."""
    spec = "|".join(pod.gpu_spec) or "any"
    return f"trace/{department}/{pod.cpu_milli}m-{pod.memory_mib}Mi-{pod.gpus:g}gpu-{spec}-{pod.qos or 'none'}"


def submit_pod(pod: PodRow, *, speedup: float, workers: int = 1) -> bool:
    """Submit one trace pod as a job (of `workers` workers when the gang plan makes it a gang); False when the demo
    cluster can never run it (told, not hidden)."""
    department = _pick(pod.name, list(Department.objects.order_by("name")))
    models = sorted(set(Node.objects.exclude(gpu_model=None).values_list("gpu_model__name", flat=True)))
    gpu_model = GPUModel.objects.get(name=_pick(pod.name, models)) if pod.gpus > 0 and models else None
    member = Membership.objects.filter(department=department).order_by("id").first()
    submitter = member.user if member else get_user_model().objects.filter(is_staff=True).order_by("id").first()
    workers = gang_workers(pod, workers, department, gpu_model)
    try:
        submission.job_submit(
            submitter=submitter, department=department, name=pod.name, image="registry.local/trace-replay:1",
            command=f"replay {pod.name}", framework=Framework.objects.get(name="pytorch", version="2.1"),
            gpu_model=gpu_model, gpus=Decimal(str(pod.gpus)) if gpu_model else Decimal(0), cpu_milli=pod.cpu_milli,
            memory_mib=pod.memory_mib, task_key=task_key(pod, department.name), workers=workers,
            annotations={RUNTIME_LABEL: f"{demo_run_s(pod, speedup):.0f}"},
        )
    except ApplicationError:
        return False
    return True


def demo_submit_due(*, redis, namespace: str, now: float | None = None) -> int:
    """Submit every trace pod whose sped-up creation time has come; returns how many were submitted."""
    path = Path(settings.TRACES_DIR) / POD_LIST
    if not path.exists():
        return 0
    now = time.time() if now is None else now
    speedup = float(settings.TIDAL_DEMO_SPEEDUP)
    gangs = demo_gangs(path, speedup, Path(settings.TRACES_DIR) / "helios")
    compress = speedup * settings.TIDAL_DEMO_LOAD_FACTOR / gangs.growth  # the gangs keep the offered GPU load
    trace = read_pods(path)
    first = next((i for i, p in enumerate(trace) if p.creation >= settings.TIDAL_DEMO_TRACE_START_S), 0)
    start_s = trace[first].creation  # the demo's t=0 is the first pod from the start day on
    key = f"{namespace}:{STATE_KEY}"
    redis.hsetnx(key, "started_at", now)
    redis.hsetnx(key, "next", first)
    started, cursor = float(redis.hget(key, "started_at")), int(redis.hget(key, "next"))
    pods = itertools.takewhile(lambda p: (p.creation - start_s) / compress <= now - started, trace[cursor:])
    due = list(itertools.islice(pods, settings.TIDAL_DEMO_MAX_PER_TICK))
    submitted = sum(submit_pod(p, speedup=speedup, workers=gangs.of(p)) for p in due)
    redis.hset(key, "next", cursor + len(due))
    return submitted
