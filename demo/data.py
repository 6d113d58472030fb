"""The embedded demo: a cluster from the Alibaba 2023 node list, departments shaped like Helios quotas,
frameworks, and accounts to sign in with. Idempotent: loading twice changes nothing."""
import math
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction

from cluster import types as ct
from cluster.simulated.alibaba import read_nodes as read_alibaba_nodes
from cluster.simulated.traces import helios_shares
from cluster.types import Pool
from colocation.loads import PEAK_SHARE
from colocation.models import InferenceService, Node, NodeState, ResourceGroup, ScalingThreshold
from colocation.services import service_create
from core.models import Department, GPUModel, Membership
from scheduler.models import Framework, Quota

NODE_LIST = "alibaba-gpu-2023/openb_node_list_all_node.csv"
HELIOS_QUOTAS = "helios/Earth_gpu_number.csv"

# GPU memory per model; G2 and G3 are Alibaba's undisclosed internal models, so their sizes are assumed.
GPU_MEMORY_GIB = {"T4": 16, "P100": 16, "V100M16": 16, "V100M32": 32, "A10": 24, "G2": 24, "G3": 32}
FRAMEWORKS = {  # (name, version): certified GPU models
    ("pytorch", "2.1"): ["T4", "P100", "V100M16", "V100M32", "A10", "G2", "G3"],
    ("pytorch", "1.13"): ["T4", "P100", "V100M16", "V100M32", "G2"],
    ("tensorflow", "2.15"): ["T4", "V100M16", "V100M32", "A10", "G2"],
    ("paddlepaddle", "2.5"): ["T4", "P100", "V100M16", "V100M32"],
    ("caffe", "1.0"): ["P100", "T4"],
}
DEPARTMENTS = ["ml-search", "ml-ads", "ml-vision", "ml-speech", "ml-nlp"]
FIXED_POOL_SHARE = 0.1  # of each group, never lent to inference
OWN_SHARE_OF_CAPACITY = 0.8  # departments together own this much of each resource
BORROWED_SHARE_OF_CAPACITY = Decimal("0.25")  # each department may borrow this much more
OPERATOR = ("operator", "tidal-operator")
DEMO_PASSWORD = "tidal-demo"
USERS = [("alice", "ml-search", Membership.Role.ADMIN), ("bob", "ml-search", Membership.Role.MEMBER),
         ("carol", "ml-vision", Membership.Role.ADMIN)]

BUILT_IN_NODES = [  # used when the trace folder is missing
    ct.NodeView(name=f"builtin-{(model or 'cpu').lower()}-{i}", resource_group=model or "CPU", gpu_model=model, gpu_count=gpus,
             cpu_milli=cpu, memory_mib=mem, pool=ct.Pool.COLOCATION,
                state=ct.NodeState.OFFLINE_NORMAL)
    for model, gpus, cpu, mem, count in [
        ("T4", 2, 64000, 262144, 6), ("V100M32", 8, 96000, 786432, 4), ("A10", 1, 32000, 131072, 2),
        (None, 0, 64000, 262144, 2),
    ]
    for i in range(count)
]


@dataclass(frozen=True)
class DemoSummary:
    source: str
    nodes: int
    gpus: int
    departments: int


def department_shares(helios_csv: Path, count: int) -> list[float]:
    """The `count` largest virtual-cluster quotas on Helios Earth's last day, as shares summing to 1."""
    top = list(helios_shares(helios_csv).values())[:count]
    return [share / sum(top) for share in top]


def read_nodes(traces_dir: Path, every: int) -> tuple[list[ct.NodeView], str]:
    path = traces_dir / NODE_LIST
    if not path.exists():
        return BUILT_IN_NODES, f"built-in cluster ({path} not found)"
    nodes = read_alibaba_nodes(path)
    return nodes[::every], f"{path} (1 node in {every})"


def _seed_catalogue() -> dict[str, GPUModel]:
    models = {
        name: GPUModel.objects.update_or_create(name=name, defaults={"memory_gib": gib})[0]
        for name, gib in GPU_MEMORY_GIB.items()
    }
    for (name, version), certified in FRAMEWORKS.items():
        framework, _ = Framework.objects.get_or_create(name=name, version=version)
        framework.certified_on.set([models[m] for m in certified])
    return models


def _seed_nodes(nodes: list[ct.NodeView], models: dict[str, GPUModel]) -> None:
    groups: dict[str, list[ct.NodeView]] = {}
    for node in nodes:
        groups.setdefault(node.resource_group, []).append(node)
    for group_name, members in groups.items():
        gpu_model = models.get(members[0].gpu_model) if members[0].gpu_model else None
        # forecast-driven lending off: the demo's day lasts TIDAL_DEMO_DAY_S while demand history is kept per real
        # minute, so a forecast would read a whole day's swing as minutes' (docs/concepts/demo-cluster.md)
        group, _ = ResourceGroup.objects.get_or_create(
            name=group_name.lower(),
            defaults={"hardware_class": group_name, "gpu_model": gpu_model, "lending_forecast": False},
        )
        fixed = math.ceil(len(members) * FIXED_POOL_SHARE)
        for i, node in enumerate(members):
            pool, state = _initial_pool_and_state(i, fixed)
            Node.objects.get_or_create(
                name=node.name,
                defaults=dict(resource_group=group, gpu_model=gpu_model, gpu_count=node.gpu_count,
                              cpu_milli=node.cpu_milli, memory_mib=node.memory_mib, pool=pool, state=state),
            )


def _initial_pool_and_state(index: int, fixed: int) -> tuple[str, str]:
    """Fixed pool first (training); the co-location pool starts half online (inference), half offline."""
    if index < fixed:
        return Pool.FIXED, NodeState.OFFLINE_NORMAL
    return Pool.COLOCATION, (NodeState.OFFLINE_NORMAL if index % 2 else NodeState.ONLINE_NORMAL)


def _seed_departments(nodes: list[ct.NodeView], shares: list[float], models: dict[str, GPUModel]) -> None:
    capacity: dict[str, float] = {"cpu": 0, "memory": 0}
    for node in nodes:
        capacity["cpu"] += node.cpu_milli
        capacity["memory"] += node.memory_mib
        if node.gpu_model:
            capacity[node.gpu_model] = capacity.get(node.gpu_model, 0) + node.gpu_count
    for name, share in zip(DEPARTMENTS, shares):
        department, _ = Department.objects.get_or_create(
            name=name, defaults={"description": f"demo department; quota share {share:.0%} (Helios Earth)"}
        )
        for resource, total in capacity.items():
            own = Decimal(math.floor(total * OWN_SHARE_OF_CAPACITY * share))
            borrowed = Decimal(math.floor(Decimal(total) * BORROWED_SHARE_OF_CAPACITY))
            kind, gpu_model = ("gpu", models[resource]) if resource in models else (resource, None)
            Quota.objects.get_or_create(
                department=department, resource_kind=kind, gpu_model=gpu_model,
                defaults={"own": own, "borrowed": borrowed},
            )


def _seed_users() -> None:
    User = get_user_model()
    # every account has an address (a reserved domain: nothing leaves), so the demo's notification e-mail shows in
    # the worker's log (docs/concepts/notifications.md#events-and-channels)
    operator, created = User.objects.get_or_create(username=OPERATOR[0], defaults={
        "is_staff": True, "is_superuser": True, "email": f"{OPERATOR[0]}@example.org"})
    if created:
        operator.set_password(OPERATOR[1])
        operator.save()
    for username, department, role in USERS:
        user, created = User.objects.get_or_create(username=username, defaults={"email": f"{username}@example.org"})
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        Membership.objects.get_or_create(user=user, department=Department.objects.get(name=department),
                                         defaults={"role": role})


# Demo inference services (one per GPU group with room to breathe) start sized for their peak, as a static
# deployment would be: STATIC_SHARE of the group's online GPUs, between minRate and maxRate of the lending
# thresholds (0.4-0.8), so nothing moves before the autoscaler does. Their traffic (colocation/loads.py) peaks at
# what that many replicas serve at expectRate (max_replicas × PEAK_SHARE); in the night trough the autoscaler
# scales them in below the lending minRate, so nodes are lent to training, and at the morning peak they need
# more than the online side kept after lending, so nodes are taken back.
STATIC_SHARE = 0.7
MIN_SERVICE_NODES = 4  # co-location nodes a group needs to host a demo service (smaller groups only train)
DEMO_RATES = {"min_rate": 0.3, "expect_rate": 0.6, "max_rate": 0.8}  # GPU utilization per replica


# The demo's LLM service (docs/concepts/demo-cluster.md#the-llm-service): a model too large for one machine, served by
# groups of LLM_GROUP_SIZE pods of LLM_GPUS_PER_POD GPUs (tensor parallel within a node, pipeline across nodes), on the
# GPU model with the most co-location nodes that hold such a pod. It takes LLM_STATIC_GROUPS of that model's static
# share from the one-pod service there, so the online side is as loaded as before and training keeps what it had.
LLM_SERVICE = "llm-chat"
LLM_DEPARTMENT = "ml-nlp"
LLM_GROUP_SIZE = 2
LLM_GPUS_PER_POD = 8
LLM_STATIC_GROUPS = 4  # at the demo's peak (PEAK_SHARE of max_replicas)
LLM_MIN_NODES = 16  # co-location nodes of the model (a peak of 4 groups takes 8 of them whole)
# Real seconds, as the simulated cluster counts them: 48 minutes of the demo's compressed day (TIDAL_DEMO_DAY_S 600),
# long enough to see a group starting on the service page, short against the day's rise.
LLM_STARTUP_S = 20
LLM_TTFT_P99_S = 0.5  # NVIDIA Dynamo's planner's time-to-first-token target
LLM_POD = {"cpu_milli_per_replica": 48000, "memory_mib_per_replica": 196608}


def llm_group() -> ResourceGroup | None:
    """The GPU group the LLM service runs on: most co-location nodes of LLM_GPUS_PER_POD GPUs, at least
    LLM_MIN_NODES of them."""
    counts = {}
    for group in ResourceGroup.objects.exclude(gpu_model=None).order_by("name"):
        counts[group] = Node.objects.filter(resource_group=group, pool=Pool.COLOCATION,
                                            gpu_count__gte=LLM_GPUS_PER_POD).count()
    best = max(counts, key=counts.get, default=None)
    return best if best is not None and counts[best] >= LLM_MIN_NODES else None


def _seed_services() -> None:
    """One inference service per GPU group with at least MIN_SERVICE_NODES co-location nodes, and the LLM service."""
    llm = llm_group()
    departments = list(Department.objects.order_by("name"))
    for i, group in enumerate(ResourceGroup.objects.exclude(gpu_model=None).order_by("name")):
        nodes = Node.objects.filter(resource_group=group, pool=Pool.COLOCATION)
        if nodes.count() < MIN_SERVICE_NODES:
            continue
        online = sum(n.gpu_count for n in nodes.filter(state=NodeState.ONLINE_NORMAL))
        if group == llm:  # what the LLM service's groups hold at the peak
            online -= LLM_STATIC_GROUPS * LLM_GROUP_SIZE * LLM_GPUS_PER_POD / STATIC_SHARE
        per_replica = 2 if max(n.gpu_count for n in nodes) >= 8 else 1
        replicas = max(2, math.floor(online * STATIC_SHARE / per_replica))
        service, created = InferenceService.objects.get_or_create(
            name=f"{group.name}-serving",
            defaults=dict(department=departments[i % len(departments)], gpu_model=group.gpu_model, priority=10,
                          replicas=replicas, min_replicas=2, max_replicas=math.ceil(replicas / PEAK_SHARE),
                          gpus_per_replica=per_replica, cpu_milli_per_replica=4000, memory_mib_per_replica=16384),
        )
        if created:
            ScalingThreshold.objects.create(service=service, metric="gpu", **DEMO_RATES)
    if llm is not None and not InferenceService.objects.filter(name=LLM_SERVICE).exists():
        _seed_llm_service(llm)


def _seed_llm_service(group: ResourceGroup) -> InferenceService:
    """Through the service API's own checks (a group no node could hold is refused), as the operator."""
    return service_create(
        actor=get_user_model().objects.get(username=OPERATOR[0]), department=Department.objects.get(name=LLM_DEPARTMENT),
        thresholds=[{"metric": "gpu", **DEMO_RATES}], name=LLM_SERVICE, gpu_model=group.gpu_model, priority=10,
        replicas=LLM_STATIC_GROUPS, min_replicas=2, max_replicas=math.ceil(LLM_STATIC_GROUPS / PEAK_SHARE),
        group_size=LLM_GROUP_SIZE, gpus_per_replica=LLM_GPUS_PER_POD, startup_s=LLM_STARTUP_S,
        ttft_p99_target_s=LLM_TTFT_P99_S, max_surge=1, max_unavailable=1, **LLM_POD)


@transaction.atomic
def demo_load(*, traces_dir: Path, every: int = 10) -> DemoSummary:
    nodes, source = read_nodes(traces_dir, every)
    helios = traces_dir / HELIOS_QUOTAS
    shares = department_shares(helios, len(DEPARTMENTS)) if helios.exists() else [1 / len(DEPARTMENTS)] * len(DEPARTMENTS)
    models = _seed_catalogue()
    _seed_nodes(nodes, models)
    _seed_departments(nodes, shares, models)
    _seed_users()  # first: the operator creates the LLM service
    _seed_services()
    return DemoSummary(source=source, nodes=Node.objects.count(), gpus=sum(n.gpu_count for n in nodes),
                       departments=Department.objects.count())
