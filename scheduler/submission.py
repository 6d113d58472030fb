"""A job's submission: every reason a request could never run here, by field (refused with all of them,
nothing written), and the admins' right-sizing override."""
from decimal import Decimal

from django.core.exceptions import PermissionDenied
from django.db import transaction

from core import selectors as core_selectors
from core.decisions import decision_record
from core.errors import ApplicationError, Conflict
from core.models import CPU, MEMORY, Decision, Department, GPUModel
from scheduler import selectors
from scheduler.models import Framework, Topology, TrainingJob


# --- training jobs -----------------------------------------------------------------------------


MAX_WORKERS = 1024  # a bound the API's schema states: far above any quota here, and within the column's range


def _job_errors(*, submitter, department, framework, gpu_model, gpus: Decimal, cpu_milli: int, memory_mib: int,
                workers: int = 1, topology: str = Topology.PACK) -> dict:
    """Every reason the request can never run here, by field. GPUs, CPU and memory are per worker."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    if not submitter.is_staff and not core_selectors.is_member(user=submitter, department=department):
        add("department", f"you are not a member of department {department}")
    elif department.children.exists():  # docs/concepts/quotas-and-priority.md#quota-trees-and-fair-sharing
        add("department", f"{department} has departments below it: only the leaves of the quota tree run jobs")
    if gpus < 0:
        add("gpus", f"must be zero or more, got {gpus}")
    elif gpus > 1 and gpus != gpus.to_integral_value():
        add("gpus", f"fractions are only allowed below 1 GPU; {gpus} is neither below 1 nor whole")
    if workers < 1:
        add("workers", f"must be at least 1, got {workers}")
    elif workers > MAX_WORKERS:
        add("workers", f"at most {MAX_WORKERS} workers, got {workers}")
    elif workers > 1 and gpus != gpus.to_integral_value() and "gpus" not in errors:
        add("gpus", f"{amount_text(gpus)} GPUs is a fraction: each of a gang's {workers} workers asks for whole GPUs "
                    "(or none)")
    if topology not in Topology.values:
        add("topology", f"must be one of {', '.join(Topology.values)}, got {topology!r}")
    certified = {model.name for model in framework.certified_on.all()}  # the API's input prefetched them
    if gpus > 0 and gpu_model is None and not certified:  # an open model is any certified one: there is none
        add("framework", f"{framework} is certified on no GPU model: a GPU job needs one")
    if gpu_model is not None and gpu_model.name not in certified:
        add("framework", f"{framework} is not certified on {gpu_model}; certified on: {', '.join(sorted(certified)) or 'none'}")
    limits = selectors.node_limits(gpu_models=sorted(certified))
    if gpus > limits.max_gpus and "gpus" not in errors:
        add("gpus", f"{gpus} GPUs is more than the largest node with a GPU model certified for {framework} ({limits.max_gpus})")
    if cpu_milli <= 0:
        add("cpu_milli", f"must be more than 0, got {cpu_milli}")
    elif cpu_milli > limits.max_cpu_milli:
        add("cpu_milli", f"{cpu_milli}m CPU is more than any node has ({limits.max_cpu_milli}m)")
    if memory_mib <= 0:
        add("memory_mib", f"must be more than 0, got {memory_mib}")
    elif memory_mib > limits.max_memory_mib:
        add("memory_mib", f"{memory_mib} MiB memory is more than any node has ({limits.max_memory_mib} MiB)")
    if not errors.keys() & {"gpus", "cpu_milli", "memory_mib"}:
        for field, message in _worker_fit_errors(certified=sorted(certified), gpus=gpus, cpu_milli=cpu_milli,
                                                 memory_mib=memory_mib):
            add(field, message)
    if workers > 1 and not errors.keys() & {"department", "workers", "gpus", "gpu_model", "framework"}:
        for field, message in _gang_quota_errors(department=department, certified=sorted(certified), gpus=gpus,
                                                 cpu_milli=cpu_milli, memory_mib=memory_mib, workers=workers):
            add(field, message)
    return errors


def _worker_fit_errors(*, certified: list[str], gpus: Decimal, cpu_milli: int,
                       memory_mib: int) -> list[tuple[str, str]]:
    """A worker runs on one node: its GPUs, CPU and memory must fit the same node (each fitting some node is not
    enough). GPU workers look at nodes of the certified models with as many GPUs, CPU-only ones at every node."""
    room = selectors.worker_room(gpu_models=certified, gpus=gpus, cpu_milli=cpu_milli, memory_mib=memory_mib)
    if room.fitting:
        return []
    plural = "s" if gpus > 1 else ""
    where = f"{' or '.join(certified)} node with {amount_text(gpus)} GPU{plural}" if gpus > 0 else "node"
    if cpu_milli > room.max_cpu_milli:
        return [("cpu_milli", f"{cpu_milli}m CPU is more than any {where} has ({room.max_cpu_milli}m)")]
    if memory_mib > room.max_memory_mib:
        return [("memory_mib", f"{memory_mib} MiB memory is more than any {where} has ({room.max_memory_mib} MiB)")]
    return [("memory_mib", f"no single {where} has both {cpu_milli}m CPU and {memory_mib} MiB memory")]


def _gang_quota_errors(*, department: Department, certified: list[str], gpus: Decimal, cpu_milli: int,
                       memory_mib: int, workers: int) -> list[tuple[str, str]]:
    """A gang is admitted whole, and takes all it asks from one kind of quota: own when every resource has room
    there, else borrowed (scheduler.policy.quota). So it can ever start only if, for own or for borrowed, workers x
    its GPUs fit that quota of one GPU model it may run on (a model without a quota gives nothing) and workers x its
    CPU and memory fit that kind's CPU and memory quotas (where the department has them)."""
    limits = selectors.quota_limits(department=department)
    total = {"gpus": workers * gpus, CPU: workers * cpu_milli, MEMORY: workers * memory_mib}
    short = []
    for slot, kind in enumerate(("own", "borrowed")):
        parts = []
        if gpus > 0 and not any(model in limits and total["gpus"] <= limits[model][slot] for model in certified):
            named = " and ".join(f"{model} {amount_text(limits[model][slot])}" if model in limits else f"{model} none"
                                 for model in certified)
            parts.append(f"{amount_text(total['gpus'])} GPUs above {named}")
        for resource, unit in ((CPU, "m CPU"), (MEMORY, " MiB memory")):
            if resource in limits and total[resource] > limits[resource][slot]:
                parts.append(f"{total[resource]}{unit} above {amount_text(limits[resource][slot])}{unit}")
        if not parts:
            return []
        short.append(f"{kind}: {', '.join(parts)}")
    asked = [f"{amount_text(total['gpus'])} GPUs"] * (gpus > 0) + [f"{total[CPU]}m CPU", f"{total[MEMORY]} MiB memory"]
    return [("workers", f"{workers} workers ask {', '.join(asked[:-1])} and {asked[-1]} at once, more than "
                        f"{department}'s own or borrowed quota could ever give (a gang takes all it asks from one of "
                        f"them): {'; '.join(short)}")]


def amount_text(value: Decimal) -> str:
    """An amount as sentences write it: 2.000 -> 2, 0.500 -> 0.5, 10 -> 10 (not 1E+1)."""
    return f"{Decimal(value).normalize():f}"


@transaction.atomic
def job_submit(
    *,
    submitter,
    department: Department,
    name: str,
    image: str,
    command: str,
    framework: Framework,
    gpu_model: GPUModel | None,
    gpus: Decimal,
    cpu_milli: int,
    memory_mib: int,
    task_key: str = "",
    expected_duration_s: int | None = None,
    annotations: dict[str, str] | None = None,
    workers: int = 1,
    topology: str = Topology.PACK,
    preemptible: bool = True,
) -> TrainingJob:
    """A job of `workers` identical workers (a gang when more than one), each asking `gpus`, `cpu_milli` and
    `memory_mib`, on `gpu_model` (None: any model its framework is certified on, chosen by placement); refused with every field's reason, nothing written, when it could never run."""
    # Locked to the end of the transaction: a child added to the department meanwhile (department_create locks the
    # parent too) would leave this job in a department that is no longer a leaf.
    Department.objects.select_for_update().get(pk=department.pk)
    errors = _job_errors(
        submitter=submitter, department=department, framework=framework, gpu_model=gpu_model,
        gpus=gpus, cpu_milli=cpu_milli, memory_mib=memory_mib, workers=workers, topology=topology,
    )
    if errors:
        raise ApplicationError("the job cannot be submitted", fields=errors)
    job = TrainingJob.objects.create(
        name=name, task_key=task_key or f"{department.name}/{name}", department=department, submitter=submitter,
        image=image, command=command, framework=framework, gpu_model=gpu_model, gpus=gpus,
        cpu_milli=cpu_milli, memory_mib=memory_mib, expected_duration_s=expected_duration_s,
        annotations=annotations or {}, workers=workers, topology=topology, preemptible=preemptible,
    )
    gang = f" as a gang of {workers} workers ({topology})" if workers > 1 else ""
    decision_record(
        kind=Decision.Kind.PENDING, subject=f"job:{job.pk}", department=department, reason="submitted",
        message=f"pending: submitted by {submitter}{gang} and waiting for the next scheduling cycle",
    )
    return job


@transaction.atomic
def job_keep_request(*, job: TrainingJob, keep: bool, actor) -> TrainingJob:
    """Turn right-sizing off (keep the request as asked) or back on for one job: the admins' override
    (docs/concepts/quotas-and-priority.md#right-sizing).
    It applies from the job's next admission."""
    job = TrainingJob.objects.select_for_update().select_related("department").get(pk=job.pk)
    if not core_selectors.can_administer(user=actor, department=job.department):
        raise PermissionDenied(f"only operators and admins of {job.department} override right-sizing")
    if job.is_finished:
        raise Conflict.for_field("keep_request", f"job {job.pk} is already {job.status}")
    if job.keep_request != keep:
        job.keep_request = keep
        job.save(update_fields=["keep_request"])
        decision_record(
            kind=Decision.Kind.RIGHTSIZING, subject=f"job:{job.pk}", department=job.department,
            reason="request-kept" if keep else "rightsizing-on",
            message=(f"right-sizing turned off by {actor}: the request is bound as asked" if keep
                     else f"right-sizing turned back on by {actor}: bound from the task's last runs"),
        )
    return job
