"""The demo's workload: training jobs drawn from the Alibaba 2023 pod list, submitted on a sped-up clock.

Mapping (the trace has no departments, frameworks or GPU models for its pods):
- department: a stable hash of the pod name picks one of the demo departments;
- submitter: a member of that department, else the operator;
- GPUs: `num_gpu` whole GPUs, or `gpu_milli / 1000` of one GPU; GPU model: the hash picks one of the models
  the cluster has; framework pytorch-2.1 (certified on every demo model);
- simulated run time: (deletion − scheduled) / speed-up, kept within [2 min, 2 h]; pods that never ran: 5 min;
- arrivals: from TIDAL_DEMO_TRACE_START_S on (day 120, where the trace is dense), inter-arrival times divided
  by speed-up × load factor: the demo cluster holds 1 node in 10 and the trace alone would never contend it.
"""
import itertools
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
from colocation.models import Node
from core.errors import ApplicationError
from core.models import Department, GPUModel, Membership
from scheduler import services
from scheduler.models import Framework

POD_LIST = "alibaba-gpu-2023/openb_pod_list_default.csv"
STATE_KEY = "demo-workload"  # Redis hash under the instance's namespace: started_at, next row
MIN_RUNTIME_S, MAX_RUNTIME_S, NEVER_RAN_S = 120.0, 7200.0, 300.0


@lru_cache(maxsize=2)
def read_pods(path: Path) -> tuple[PodRow, ...]:
    """The validated pod list (cluster/simulated/alibaba.py), read once per file."""
    return alibaba.read_pods(path).pods


def run_time_s(pod: PodRow) -> float | None:
    return pod.deletion - pod.scheduled if pod.scheduled is not None and pod.deletion is not None else None


def _pick(name: str, options: list):
    return options[zlib.crc32(name.encode()) % len(options)]


def task_key(pod: PodRow, department: str) -> str:
    """The trace has no notion of a recurring job: pods of one department with the same request shape and
    QoS count as runs of one task (8,152 pods have 162 shapes), so profiles build up a history in the demo."""
    spec = "|".join(pod.gpu_spec) or "any"
    return f"trace/{department}/{pod.cpu_milli}m-{pod.memory_mib}Mi-{pod.gpus:g}gpu-{spec}-{pod.qos or 'none'}"


def submit_pod(pod: PodRow, *, speedup: float) -> bool:
    """Submit one trace pod as a job; False when the demo cluster can never run it (told, not hidden)."""
    department = _pick(pod.name, list(Department.objects.order_by("name")))
    models = sorted(set(Node.objects.exclude(gpu_model=None).values_list("gpu_model__name", flat=True)))
    gpu_model = GPUModel.objects.get(name=_pick(pod.name, models)) if pod.gpus > 0 and models else None
    member = Membership.objects.filter(department=department).order_by("id").first()
    submitter = member.user if member else get_user_model().objects.filter(is_staff=True).order_by("id").first()
    run = run_time_s(pod)
    run_s = run / speedup if run is not None else NEVER_RAN_S
    try:
        services.job_submit(
            submitter=submitter, department=department, name=pod.name, image="registry.local/trace-replay:1",
            command=f"replay {pod.name}", framework=Framework.objects.get(name="pytorch", version="2.1"),
            gpu_model=gpu_model, gpus=Decimal(str(pod.gpus)) if gpu_model else Decimal(0), cpu_milli=pod.cpu_milli,
            memory_mib=pod.memory_mib, task_key=task_key(pod, department.name),
            annotations={RUNTIME_LABEL: f"{min(max(run_s, MIN_RUNTIME_S), MAX_RUNTIME_S):.0f}"},
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
    speedup, compress = float(settings.TIDAL_DEMO_SPEEDUP), settings.TIDAL_DEMO_SPEEDUP * settings.TIDAL_DEMO_LOAD_FACTOR
    trace = read_pods(path)
    first = next((i for i, p in enumerate(trace) if p.creation >= settings.TIDAL_DEMO_TRACE_START_S), 0)
    start_s = trace[first].creation  # the demo's t=0 is the first pod from the start day on
    key = f"{namespace}:{STATE_KEY}"
    redis.hsetnx(key, "started_at", now)
    redis.hsetnx(key, "next", first)
    started, cursor = float(redis.hget(key, "started_at")), int(redis.hget(key, "next"))
    pods = itertools.takewhile(lambda p: (p.creation - start_s) / compress <= now - started, trace[cursor:])
    due = list(itertools.islice(pods, settings.TIDAL_DEMO_MAX_PER_TICK))
    submitted = sum(submit_pod(p, speedup=speedup) for p in due)
    redis.hset(key, "next", cursor + len(due))
    return submitted
