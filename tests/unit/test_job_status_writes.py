"""A job's status changes only through the job services (scheduler/lifecycle.py: job_admit, job_start, job_finish,
job_requeue, job_take_back, job_cancel), as Kueue's workloads change only through pkg/workload: the loops, the
lending controller and the views call them and never write a status themselves. The check reads the source: an
assignment to `<x>.status` of a JobStatus, a `status=JobStatus…` given to a query's update or create, or "status"
among a bulk_update's fields, anywhere but there."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("cluster", "core", "scheduler", "colocation", "profiling", "streaming", "notifications", "experiments", "demo",
        "frontend", "tidal")
HOME = ROOT / "scheduler" / "lifecycle.py"
WRITES = {"update", "create", "bulk_create", "get_or_create", "update_or_create"}


def _names_job_status(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "JobStatus" for n in ast.walk(node))


def status_writes(tree: ast.AST) -> list[int]:
    """Lines that write a job's status."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in ast.walk(target)]
            if any(isinstance(t, ast.Attribute) and t.attr == "status" for t in targets) and _names_job_status(node.value):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in WRITES and any(k.arg == "status" and _names_job_status(k.value) for k in node.keywords):
                lines.append(node.lineno)
            if node.func.attr == "bulk_update" and any(isinstance(c, ast.Constant) and c.value == "status"
                                                        for arg in node.args[1:] for c in ast.walk(arg)):
                lines.append(node.lineno)
    return lines


def test_no_job_status_is_written_outside_the_job_services():
    found = []
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if path == HOME or "migrations" in path.parts:
                continue
            found += [f"{path.relative_to(ROOT)}:{line}" for line in status_writes(ast.parse(path.read_text()))]
    assert not found, f"a job's status written outside {HOME.relative_to(ROOT)}: {found}"


def test_the_check_sees_every_way_of_writing_a_status():
    source = """
job.status = JobStatus.RUNNING
job.status, job.node = JobStatus.PENDING, None
TrainingJob.objects.filter(pk=1).update(status=JobStatus.CANCELLED)
TrainingJob.objects.create(name="x", status=JobStatus.PENDING)
TrainingJob.objects.bulk_update(jobs, ["status", "node"])
run.status = ReplayRun.Status.RUNNING  # not a job
TrainingJob.objects.filter(status=JobStatus.PENDING).count()  # a read
"""
    assert status_writes(ast.parse(source)) == [2, 3, 4, 5, 6]
    assert status_writes(ast.parse(HOME.read_text()))  # the services themselves write it
