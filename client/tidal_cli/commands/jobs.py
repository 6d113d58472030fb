"""Training jobs: submit, ls, describe (why it waits), cancel, logs."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from tidal_cli import jobfile, quantities
from tidal_cli.api import ApiError, Client, Decision, JobDetail
from tidal_cli.commands import OUTPUT, example
from tidal_cli.commands.cluster import describe_service
from tidal_cli.output import Format, ago, console, cores, emit, fields, grid, mem, number
from tidal_cli.runtime import Exit, Failure, connect, exit_code, print_error

WAITING = ("pending", "preemption")  # the decisions that say why a job waits (as the console reads them)


def job_id(text: str) -> int:
    if not text.isdigit():
        raise Failure(f"JOB: {text!r} is not a job id (a number, as `tidal ls` shows)", Exit.BAD_INPUT)
    return int(text)


def gpus_text(job: dict[str, Any]) -> str:
    """"1 T4", "0.5 T4", "4x2 A100" (workers x GPUs each), "-" for a CPU-only job."""
    gpus = number(job["gpus"])
    if gpus == "0":
        return "-"
    model = job.get("assigned_gpu_model") or job.get("gpu_model") or ""
    each = f"{job['workers']}x{gpus}" if job.get("workers", 1) > 1 else gpus
    return f"{each} {model}".strip()


@example("tidal submit -f job.yaml", "tidal submit -f job.yaml --gpus 2 --workers 4",
         "tidal submit --name bert --department ml-search --image registry/bert:2 --framework pytorch-2.1 "
         "--gpu-model T4 --gpus 0.5 --cpu 4 --memory 16Gi -- python train.py --epochs 3")
def submit(
    command: list[str] = typer.Argument(None, help="The command to run, after `--` (or --command, or the file's)."),
    file: Path = typer.Option(None, "--file", "-f", help="A YAML job file (the API's fields; cpu/memory as "
                                                          "quantities). Flags override its values."),
    name: str = typer.Option(None, "--name", "-n"),
    department: str = typer.Option(None, "--department", "-d", help="Default: your department, if you have one."),
    image: str = typer.Option(None, "--image"),
    command_text: str = typer.Option(None, "--command", help="The command as one string."),
    framework: str = typer.Option(None, "--framework", help='"name-version", e.g. pytorch-2.1'),
    gpu_model: str = typer.Option(None, "--gpu-model", help="Omitted: any model the framework is certified on."),
    gpus: str = typer.Option(None, "--gpus", help="A fraction of one GPU (0.5) or whole GPUs (per worker)."),
    cpu: str = typer.Option(None, "--cpu", help="Per worker: 4, 500m."),
    memory: str = typer.Option(None, "--memory", help="Per worker: 16Gi, 512Mi."),
    workers: int = typer.Option(None, "--workers", "-w", help="More than 1: a gang started all together."),
    topology: str = typer.Option(None, "--topology", help="pack (fewest nodes, default) or spread."),
    preemptible: bool = typer.Option(None, "--preemptible/--non-preemptible",
                                     help="Non-preemptible: never preempted, own quota only (never borrowed)."),
    task_key: str = typer.Option(None, "--task-key", help="Groups runs of the same task for profiles."),
    expected_duration_s: int = typer.Option(None, "--expected-duration", help="Seconds, if you know."),
    output: Format = OUTPUT,
) -> None:
    """Submit a training job. The API's field errors are printed beside the field names (exit 2, nothing
    submitted)."""
    job = jobfile.load(file) if file else jobfile.JobFile(payload={})
    if command and command_text:
        raise Failure("give the command once: --command or after --", Exit.BAD_INPUT)
    flags = {"name": name, "department": department, "image": image, "framework": framework, "gpu_model": gpu_model,
             "gpus": gpus, "workers": workers, "topology": topology, "preemptible": preemptible, "task_key": task_key,
             "expected_duration_s": expected_duration_s,
             "command": command_text or (" ".join(command) if command else None),
             "cpu_milli": quantities.cpu_milli(cpu) if cpu is not None else None,
             "memory_mib": quantities.memory_mib(memory) if memory is not None else None}
    for key, value in flags.items():
        if value is not None:
            job.payload[key] = value
            job.lines.pop(key, None)  # a flag's value has no line
    client = connect()
    try:
        if "department" not in job.payload:
            job.payload["department"] = _only_department(client)
        try:
            created = client.submit(job.payload)
        except ApiError as error:
            if error.fields:
                where = {key: job.where(key) for key in job.lines}
                print_error(f"the job was not submitted: {error.message}", error.fields, where)
                raise typer.Exit(exit_code(error)) from None
            raise
    finally:
        client.close()
    emit(created, output, lambda: [f"job {created['id']} submitted ({created['name']}): {created['status']}; "
                                   f"`tidal describe {created['id']}` says why it waits"])


def _only_department(client: Client) -> str:
    memberships = client.me()["memberships"]
    if len(memberships) == 1:
        return memberships[0]["department"]
    names = ", ".join(m["department"] for m in memberships) or "none"
    raise Failure(f"department: give --department (or department: in the file); yours: {names}", Exit.BAD_INPUT)


@example("tidal ls", "tidal ls --status pending --status running", "tidal ls --department ml-search",
         "tidal ls --all -o json")
def ls(
    department: list[str] = typer.Option(None, "--department", "-d", help="The department's jobs (everyone's)."),
    status: list[str] = typer.Option(None, "--status", "-s", help="pending, admitted, running, succeeded, failed, "
                                                                  "preempted, cancelled (repeatable)."),
    all_: bool = typer.Option(False, "--all", "-A", help="Every job you may see, not only yours."),
    limit: int = typer.Option(50, "--limit", min=1, help="At most this many, newest first."),
    output: Format = OUTPUT,
) -> None:
    """List training jobs: yours by default, newest first."""
    client = connect()
    try:
        mine = None if all_ or department else client.me()["username"]
        rows = []
        for name in department or [None]:
            rows += client.jobs(limit=limit, submitter=mine, department=name, status=status,
                                ordering="-submitted_at")
    finally:
        client.close()
    rows = sorted(rows, key=lambda job: job["submitted_at"], reverse=True)[:limit]
    headers = ["id", "name", "department", *(["submitter"] if not mine else []), "status", "gpus", "cpu", "memory",
               "node", "age", "why"]
    table = [[job["id"], job["name"], job["department"], *([job["submitter"]] if not mine else []), job["status"],
              gpus_text(job), cores(job["cpu_milli"]), mem(job["memory_mib"]), job["node"], ago(job["submitted_at"]),
              job.get("why")]
             for job in rows]
    emit(rows, output, lambda: [grid(headers, table)] if rows else ["No jobs."])


@example("tidal describe 42", "tidal describe 42 -o json", "tidal describe service ranker")
def describe(
    what: str = typer.Argument(..., help="A job id, or `service` (then its name)."),
    name: str = typer.Argument(None, help="With `service`: the service's name (or id); with `job`: the job id."),
    output: Format = OUTPUT,
) -> None:
    """Describe a job: status, queue position and why it waits, score, right-sizing, runs, workers, decisions.
    `tidal describe service NAME` describes an inference service."""
    if what in ("service", "svc"):
        if not name:
            raise Failure("describe service: give the service's name", Exit.BAD_INPUT)
        describe_service(name, output)
        return
    if what == "job":
        what = name or ""
    elif name:
        raise Failure(f"describe: {what!r} takes no second argument (`tidal describe JOB` or "
                      f"`tidal describe service NAME`)", Exit.BAD_INPUT)
    identifier = job_id(what)
    client = connect()
    try:
        job = client.job(identifier)
        decisions = client.decisions(subject=f"job:{identifier}", limit=10)
        advice = client.job_profile(identifier).get("advice")
        usage = _usage(client, job) if job["status"] == "pending" else []
    finally:
        client.close()
    data = {**job, "decisions": decisions, "advice": advice, "quota_usage": usage}
    emit(data, output, lambda: _job_blocks(job, decisions, advice, usage))


def _usage(client: Client, job: JobDetail) -> list[dict]:
    """The department's quotas this job draws on (its GPU model, cpu, memory): the numbers behind the sentence."""
    department = next((d for d in client.departments() if d["name"] == job["department"]), None)
    if department is None:
        return []
    wanted = {"cpu", "memory"} | ({job["gpu_model"]} if job["gpu_model"] and number(job["gpus"]) != "0" else set())
    return [row for row in client.usage(department["id"]) if row["resource"] in wanted]


def _job_blocks(job: JobDetail, decisions: list[Decision], advice: dict | None, usage: list[dict]) -> list:
    blocks: list = [fields([
        ("Job", f"{job['id']} {job['name']}"), ("Status", job["status"]),
        ("Department", job["department"]), ("Submitter", job["submitter"]),
        ("Image", job["image"]), ("Command", job["command"]), ("Framework", job["framework"]),
        ("Request", f"{gpus_text(job)} GPU, {cores(job['cpu_milli'])} CPU, {mem(job['memory_mib'])} memory"
                    + (" per worker" if job["workers"] > 1 else "")),
        *([("Workers", f"{job['workers']} ({job['topology']})")] if job["workers"] > 1 else []),
        ("Quota", job["quota_kind"]), ("Node", job["node"]),
        ("Submitted", ago(job["submitted_at"])), ("Started", ago(job["started_at"])),
        ("Finished", ago(job["finished_at"])),
    ])]
    if job["status"] in ("pending", "preempted"):
        blocks += ["", *_waiting(job, decisions, usage)]
    if job["score"]:
        score = job["score"]
        blocks += ["", "Score:", grid(["base", "utilization", "aging", "total"],
                                      [[score["base"], score["utilization"], score["aging"], score["total"]]])]
    blocks += _sizing(job, advice)
    if job["placement"]:
        blocks += ["", "Workers:", grid(["rank", "node", "pod", "gpus", "state"],
                                        [[w["rank"], w["node"], w["pod"], number(w["gpus"]), w["state"]]
                                         for w in job["placement"]])]
    if job["runs"]:
        blocks += ["", "Runs:", grid(["attempt", "node", "gpu model", "started", "ended", "outcome"],
                                     [[r["attempt"], r["node"], r["gpu_model"], ago(r["started_at"]),
                                       ago(r["ended_at"]), r["outcome"]] for r in job["runs"]])]
    if decisions:
        blocks += ["", "Decisions:", grid(["when", "kind", "reason", "message"],
                                          [[ago(d["created_at"]), d["kind"], d["reason"], d["message"]]
                                           for d in decisions])]
    return blocks


def _waiting(job: JobDetail, decisions: list[Decision], usage: list[dict]) -> list:
    latest = next((d for d in decisions if d["kind"] in WAITING), None)  # newest first
    sentence = latest["message"] if latest else "waiting for the next scheduling cycle"
    position = job["queue_position"]
    lines: list = [fields([
        ("Waiting", sentence), ("Reason", job["pending_reason"]),
        ("Queue position", f"{position} ({position - 1} ahead)" if position else None),
    ])]
    if job["reservation"]:
        held = job["reservation"]
        lines.append(fields([("Reserved", f"{', '.join(held['nodes'])}, expected to start {ago(held['start_at'])}")]))
    if usage:
        lines.append(grid(["quota", "own used", "borrowed used"],
                          [[_resource(row["resource"]), _share(row["own_used"], row["own"], row["resource"]),
                            _share(row["borrowed_used"], row["borrowed"], row["resource"])] for row in usage]))
    return lines


def _resource(resource: str) -> str:
    return {"cpu": "CPU (cores)", "memory": "memory"}.get(resource, f"{resource} GPUs")


def _share(used: str, total: str, resource: str) -> str:
    show = {"cpu": cores, "memory": mem}.get(resource, number)
    return f"{show(used)} / {show(total)}"


def _sizing(job: JobDetail, advice: dict | None) -> list:
    rows = []
    if job["rightsized"]:
        bound = job["rightsized"]
        rows.append(["bound", number(bound["gpus"]), f"{cores(bound['cpu_request_milli'])} "
                     f"(limit {cores(bound['cpu_limit_milli'])})", mem(bound["memory_mib"])])
    if advice:
        for label, size in (("requested", advice["requested"]), (f"advised ({advice['runs']} runs)",
                                                                 advice["rightsized"])):
            rows.append([label, number(size["gpus"]), f"{cores(size['cpu_request_milli'])} "
                         f"(limit {cores(size['cpu_limit_milli'])})", mem(size["memory_mib"])])
    if not rows:
        return ["", "Right-sizing: no history yet; the request is kept."]
    return ["", "Right-sizing:", grid(["", "gpus", "cpu", "memory"], rows)]


@example("tidal cancel 42", "tidal cancel 42 43 44")
def cancel(jobs: list[str] = typer.Argument(..., help="Job ids.")) -> None:
    """Cancel jobs. Each is tried; the exit code is the first failure's."""
    identifiers = [job_id(text) for text in jobs]
    client = connect()
    first_failure = Exit.OK
    try:
        for identifier in identifiers:
            try:
                job = client.cancel(identifier)
            except ApiError as error:
                named = error.message.startswith(f"job {identifier} ")  # the API's (or api.py's) own words
                print_error(error.message if named else f"job {identifier}: {error.message}", error.fields)
                if error.status is None:
                    raise
                first_failure = first_failure or exit_code(error)
                continue
            console().print(f"job {identifier} ({job['name']}): {job['status']}", markup=False)
    finally:
        client.close()
    if first_failure:
        raise typer.Exit(first_failure)


@example("tidal logs 42", "tidal logs 42 -f", "tidal logs 42 --worker 3 --tail 100", "tidal logs 42 --run 1")
def logs(
    job: str = typer.Argument(..., help="The job id."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing lines as they come, until the run "
                                                               "ends (Ctrl-C stops)."),
    worker: int = typer.Option(None, "--worker", min=0, help="The worker's rank (a gang); default 0."),
    run: int = typer.Option(None, "--run", min=1, help="The run (attempt); default the latest. Ended runs are read "
                                                       "from the archive."),
    tail: int = typer.Option(None, "--tail", min=0, help="Only the last N lines."),
) -> None:
    """Print a job's log: live while its pod runs, from the archive after the run ended."""
    identifier = job_id(job)
    client = connect()
    try:
        for chunk in client.logs(identifier, run=run, worker=worker, tail=tail, follow=follow):
            sys.stdout.write(chunk)
            sys.stdout.flush()
    finally:
        client.close()


COMMANDS = {"submit": submit, "ls": ls, "describe": describe, "cancel": cancel, "logs": logs}
