"""The cluster around your jobs: quota, top (allocation per resource group), inference services."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer
import yaml
from rich.tree import Tree

from tidal_cli.api import ApiError, Client, Decision, GroupAllocation, Node, ResourceGroup, Service, ServiceGroup
from tidal_cli.commands import OUTPUT, example
from tidal_cli.output import Format, ago, band, cores, emit, fields, grid, latency, mem, number, percent
from tidal_cli.runtime import Exit, Failure, connect, exit_code, print_error

HOLDING = ["admitted", "running"]  # the job statuses that hold resources


@example("tidal quota", "tidal quota ml-search", "tidal quota -o json", "tidal quota --tree")
def quota(
    department: str = typer.Argument(None, help="Default: each of your departments (operators: all)."),
    tree: bool = typer.Option(False, "--tree", help="The quota tree: each department under its parent with, per GPU "
                                                    "model, used/own, lent, borrowed, waiting and fair share."),
    output: Format = OUTPUT,
) -> None:
    """Show own and borrowed quota per resource, with what the department's jobs hold."""
    if tree:
        return _tree(department, output)
    client = connect()
    try:
        visible = client.departments()
        if department:
            chosen = [d for d in visible if d["name"] == department]
            if not chosen:
                raise Failure(f"department {department!r}: not found (or not one of yours)", Exit.NOT_FOUND)
        else:
            mine = {m["department"] for m in client.me()["memberships"]}
            chosen = [d for d in visible if d["name"] in mine] or visible
        rows = [{"department": d["name"], **row} for d in chosen for row in client.usage(d["id"])]
    finally:
        client.close()
    table = [[row["department"], _resource(row["resource"]), _amount(row["own_used"], row["resource"]),
              _amount(row["own"], row["resource"]), _amount(row["borrowed_used"], row["resource"]),
              _amount(row["borrowed"], row["resource"])] for row in rows]
    emit(rows, output, lambda: [grid(["department", "resource", "own used", "own", "borrowed used", "borrowed"],
                                     table)] if rows else ["No quotas."])


def _tree(department: str | None, output: Format) -> None:
    """The quota tree as the API gives it (`department`: only its subtree), drawn with rich's Tree."""
    client = connect()
    try:
        figures = client.department_tree()
    finally:
        client.close()
    nodes = figures["nodes"]
    if department:
        if department not in {n["name"] for n in nodes}:
            raise Failure(f"department {department!r}: not found (or not one of yours)", Exit.NOT_FOUND)
        nodes = _subtree(nodes, department)
        figures = {**figures, "nodes": nodes}
    emit(figures, output, lambda: [*(f"warning: {w}" for w in figures["warnings"]), _drawn(nodes)] if nodes
         else ["No departments."])


def _subtree(nodes: list[dict], top: str) -> list[dict]:
    """`top` and every node below it (the API lists them depth first)."""
    start = next(i for i, n in enumerate(nodes) if n["name"] == top)
    depth = nodes[start]["depth"]
    end = next((i for i in range(start + 1, len(nodes)) if nodes[i]["depth"] <= depth), len(nodes))
    return nodes[start:end]


def _drawn(nodes: list[dict]) -> Tree:
    root = Tree("[bold]quota tree[/bold]", guide_style="dim")
    branches: dict[str | None, Tree] = {}
    for node in nodes:
        above = branches.get(node["parent"], root)
        label = (f"[bold]{node['name']}[/bold] weight {_n(node['weight'])}" + ("" if node["leaf"] else "  (pool)")
                 + ("  fenced" if node.get("fence") else ""))
        branch = above.add(label)
        for q in node["quotas"]:
            if q["subtree_own"] or q["used"] or q["pending"]:
                branch.add(_quota_line(q))
        branches[node["name"]] = branch
    return root


def _quota_line(q: dict) -> str:
    parts = [f"{q['gpu_model']}: {_n(q['used'])}/{_n(q['subtree_own'])} used"]
    parts += [f"lent {_n(q['lent'])}"] * bool(q["lent"]) + [f"borrowed {_n(q['borrowed'])}"] * bool(q["borrowed"])
    parts += [f"{_n(q['pending'])} waiting"] * bool(q["pending"]) + [f"fair share {_n(q['fair_share'])}"]
    if q["lend_limit"] is not None:
        parts.append(f"lends ≤ {_n(q['lend_limit'])}")
    return " · ".join(parts)


def _n(x: float) -> str:
    return number(round(x, 2))


def _resource(resource: str) -> str:
    return {"cpu": "cpu (cores)", "memory": "memory"}.get(resource, f"{resource} (GPUs)")


def _amount(value: str, resource: str) -> str:
    return cores(value) if resource == "cpu" else mem(value) if resource == "memory" else number(value)


@example("tidal top", "tidal top -o json")
def top(output: Format = OUTPUT) -> None:
    """Per resource group: its nodes (online: inference, offline: training) and lending, what every pod on them holds
    (GPUs, the idle GPUs the typical jobs cannot use, CPU, memory) as the lending loop last saw the cluster, the GPUs
    really busy in the newest profiled minute, and the training jobs you may see there."""
    client = connect()
    try:
        groups, nodes, figures = client.resource_groups(), client.nodes(), client.group_allocation()
        jobs = client.jobs(limit=10**6, status=HOLDING)
    finally:
        client.close()
    rows = top_rows(groups, nodes, figures, jobs)
    table = [[r["resource_group"], r["gpu_model"], f"{r['nodes_online']}/{r['nodes_offline']}",
              "on" if r["lending"] else "off", _of(r["gpus_allocated"], r["gpus"], number), number(r["gpus_used"]),
              number(r["gpus_fragmented"]),
              _of(r["cpu_milli_allocated"], r["cpu_milli"], cores), _of(r["memory_mib_allocated"], r["memory_mib"], mem),
              r["jobs"]] for r in rows]
    emit(rows, output, lambda: [grid(["group", "gpu model", "nodes on/off", "lending", "gpus", "gpus used",
                                      "gpus fragmented", "cpu", "memory", "jobs"], table), _top_note(figures)])


def _top_note(figures: list[GroupAllocation]) -> str:
    """Where the figures come from, and how old they are."""
    seen = max((f["observed_at"] for f in figures), default=None)
    if seen is None:
        return "(no figures yet: the lending loop has not looked at the cluster)"
    minute = max((f["used_minute"] for f in figures if f.get("used_minute")), default=None)
    used = (f"gpus used: busy in the minute profiled {ago(minute)}" if minute else
            "gpus used: - while the profile pipeline is behind")
    return f"(gpus: allocated, from {ago(seen)}; {used}; jobs: those you may see)"


FIGURES = ("gpus", "gpus_allocated", "gpus_used", "used_minute", "gpus_fragmented", "cpu_milli",
           "cpu_milli_allocated", "memory_mib", "memory_mib_allocated", "observed_at")


def top_rows(groups: list[ResourceGroup], nodes: list[Node], figures: list[GroupAllocation],
             jobs: list[dict]) -> list[dict]:
    """One row per group: node counts and lending, the server's figures (None where it has none yet), and the
    holding jobs the caller may see whose first worker runs there (a gang's workers share one group)."""
    group_of = {node["name"]: node["resource_group"] for node in nodes}
    jobs_in = Counter(group_of.get(job["node"] or "") for job in jobs)
    by_group = {f["resource_group"]: f for f in figures}
    rows = []
    for group in groups:
        states = [node["state"] for node in nodes if node["resource_group"] == group["name"]]
        offline = sum(state.startswith("offline") for state in states)
        seen = by_group.get(group["name"], {})
        rows.append({"resource_group": group["name"], "gpu_model": group["gpu_model"], "lending": group["lending"],
                     "nodes_online": len(states) - offline, "nodes_offline": offline,
                     **{key: seen.get(key) for key in FIGURES}, "jobs": jobs_in[group["name"]]})
    return rows


def _of(allocated, capacity, show) -> str:
    return "-" if capacity is None else f"{show(allocated)}/{show(capacity)}"


@example("tidal services", "tidal services --department ml-search -o yaml")
def services(
    department: str = typer.Option(None, "--department", "-d"),
    output: Format = OUTPUT,
) -> None:
    """List inference services with their replicas and autoscaling."""
    client = connect()
    try:
        rows = client.services(department=department)
    finally:
        client.close()
    table = [[s["name"], s["department"], s["gpu_model"], f"{s['replicas']} ({s['min_replicas']}-{s['max_replicas']})",
              number(s["gpus_per_replica"]), _state(s), ago(s["created_at"])] for s in rows]
    emit(rows, output, lambda: [grid(["name", "department", "gpu model", "replicas (min-max)", "gpus/replica",
                                      "autoscaling", "age"], table)] if rows else ["No services."])


@example("tidal create-service -f llm.yaml", "tidal create-service -f llm.yaml -o json")
def create_service(
    file: Path = typer.Option(..., "--file", "-f", help="A YAML mapping of the API's fields (name, department, "
                                                         "gpu_model, group_size, gpus_per_replica, thresholds, …); "
                                                         "rates are fractions of 1, as the API takes them "
                                                         "(max_rate: 0.8 is 80%)."),
    output: Format = OUTPUT,
) -> None:
    """Create an inference service. The API's field errors are printed beside the field names (exit 2, nothing
    created): a group no block of its GPU model's nodes could ever hold is refused on group_size."""
    payload = _service_file(file)
    client = connect()
    try:
        created = _refused_beside_fields("created", lambda: client.create_service(payload))
    finally:
        client.close()
    emit(created, output, lambda: [f"service {created['name']} created: {created['replicas']} replicas of "
                                   f"{created['group_size']} pod(s); `tidal describe service {created['name']}` "
                                   f"lists its groups"])


@example("tidal update-service llm -f restart.yaml", "tidal update-service llm -f restart.yaml -o json")
def update_service(
    name: str = typer.Argument(..., help="The service's name or id."),
    file: Path = typer.Option(..., "--file", "-f", help="A YAML mapping of the API's fields to change (e.g. "
                                                         "group_restart_policy: None); the others stay. Rates "
                                                         "are fractions of 1 (max_rate: 0.8 is 80%)."),
    output: Format = OUTPUT,
) -> None:
    """Change an inference service's fields. The API's field errors are printed beside the field names (exit 2,
    nothing changed)."""
    payload = _service_file(file)
    client = connect()
    try:
        service_id = _service_id(client, name)
        updated = _refused_beside_fields("changed", lambda: client.update_service(service_id, payload))
    finally:
        client.close()
    emit(updated, output, lambda: [f"service {updated['name']} changed: {', '.join(payload)}"])


def _service_file(file: Path) -> dict:
    try:
        payload = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise Failure(f"{file}: cannot read it ({error})", Exit.BAD_INPUT) from None
    if not isinstance(payload, dict):
        raise Failure(f"{file}: a service file is a mapping of the API's fields", Exit.BAD_INPUT)
    return payload


def _refused_beside_fields(done: str, call) -> Service:
    try:
        return call()
    except ApiError as error:
        if error.fields:
            print_error(f"the service was not {done}: {error.message}", error.fields)
            raise typer.Exit(exit_code(error)) from None
        raise


def _state(service: Service) -> str:
    return "offline" if service["offline"] else "on" if service["autoscaling"] else "off"


def describe_service(name: str, output: Format) -> None:
    client = connect()
    try:
        service = client.service(_service_id(client, name))
        scaling = client.scaling(service["id"], limit=10)
    finally:
        client.close()
    data = {**service, "scaling": scaling}
    emit(data, output, lambda: _service_blocks(service, scaling))


def _service_id(client: Client, name: str) -> int:
    match = [s for s in client.services() if s["name"] == name or str(s["id"]) == name]
    if not match:
        raise Failure(f"service {name!r}: not found (or not one of yours)", Exit.NOT_FOUND)
    return match[0]["id"]


def _serving(service: Service) -> list[tuple[str, str]]:
    """An LLM service's serving targets and request SLO (docs/concepts/autoscaling.md), those it sets."""
    targets = [f"{name} {show(service.get(key))}" for name, key, show in (
        ("TTFT p99", "ttft_p99_target_s", latency), ("TPOT p99", "tpot_p99_target_s", latency),
        ("KV cache", "kv_cache_target", percent), ("queue", "queue_target", "{:g} per replica".format))
        if service.get(key) is not None]
    rows = [("Serving targets", ", ".join(targets))] if targets else []
    ttft, tpot, gain = service.get("slo_ttft_s"), service.get("slo_tpot_s"), service.get("slo_min_gain")
    if ttft is not None or tpot is not None:
        slo = f"TTFT {latency(ttft)}, TPOT {latency(tpot)}"
        rows.append(("Sized to the SLO", f"{slo}, min gain {percent(gain)}") if gain is not None
                    else ("Request SLO", f"{slo} (not sized to it: no min gain)"))
    return rows


def _band_moves(service: Service) -> list[str]:
    """When the SLO moves the GPU band from these thresholds (docs/concepts/autoscaling.md), minute by minute."""
    if service.get("slo_min_gain") is not None:
        return ["  The GPU band is moved every minute to the SLO's sizing; each decision names the band it used."]
    if service.get("ttft_p99_target_s") is not None or service.get("tpot_p99_target_s") is not None:
        return ["  The GPU band is lowered in a minute whose latencies predict a missed target below maxRate; each "
                "decision names the band it used."]
    return []


def _service_blocks(service: Service, scaling: list[dict]) -> list:
    blocks: list = [fields([
        ("Service", f"{service['id']} {service['name']}"), ("Department", service["department"]),
        ("GPU model", service["gpu_model"]), ("Priority", service["priority"]),
        ("Replicas", f"{service['replicas']} (min {service['min_replicas']}, max {service['max_replicas']}), "
                     f"changed {ago(service['replicas_changed_at'])}"),
        ("Per pod" if service.get("group_size", 1) > 1 else "Per replica", f"{number(service['gpus_per_replica'])} GPU, {cores(service['cpu_milli_per_replica'])} CPU, "
                        f"{mem(service['memory_mib_per_replica'])} memory"),
        *([("Group restart", _restart_policy(service))] if service.get("group_size", 1) > 1 else []),
        ("Autoscaling", _state(service)), *_serving(service), ("Created", ago(service["created_at"])),
    ])]
    if service["thresholds"]:
        blocks += ["", "Thresholds:", grid(["metric", "min", "expect", "max"],
                                           [[t["metric"], percent(t["min_rate"]), percent(t["expect_rate"]),
                                             percent(t["max_rate"])] for t in service["thresholds"]]),
                   *_band_moves(service)]
    if service.get("group_size", 1) > 1:
        blocks += ["", f"Groups ({service['group_size']} pods each, leader first):",
                   grid(["group", "leader", "nodes", "ready", "restarts"],
                        [[g["index"], g["leader"] or "-", ", ".join(g["nodes"]) or "-",
                          f"{'yes' if g['ready'] else 'no'} ({g['pods_ready']}/{service['group_size']})",
                          _restarts(g)]
                         for g in service["groups"]]) if service["groups"] else "  none placed yet"]
    if scaling:
        blocks += ["", "Scaling:", grid(["when", "kind", "reason", "gpu band", "message"],
                                        [[ago(d["created_at"]), d["kind"], d["reason"], gpu_band(d), d["message"]]
                                         for d in scaling])]
    return blocks


def gpu_band(decision: Decision) -> str | None:
    """The GPU band a scaling decision applied, as the console's GPU band column shows it; where the SLO moved it,
    why and the owner's band beside it. None (shown "-") for a decision without one (an alert, a skip)."""
    data = decision.get("data") or {}
    used, owner = (data.get("bands") or {}).get("gpu"), (data.get("owner_bands") or {}).get("gpu")
    if not used:
        return None
    shown = band(used["min_rate"], used["max_rate"])
    if not owner:
        return shown
    return f"{shown} ({data.get('band_note', 'moved')}; owner's {band(owner['min_rate'], owner['max_rate'])})"


def _restart_policy(service: Service) -> str:
    """LeaderWorkerSet's restart policy (docs/concepts/service-groups.md#lifecycle), in words."""
    policy = service.get("group_restart_policy", "RecreateGroupOnPodRestart")
    return f"{policy} (" + ("a container restarted in place restarts alone, its group kept)" if policy == "None"
                            else "a container restarted in place recreates its group)")


def _restarts(group: ServiceGroup) -> str:
    """Recreations of the group, and its pods' restarts kept in place."""
    in_place = sum(group.get("pod_restarts", {}).values())
    return f"{group['restarts']}" + (f" (+{in_place} in place)" if in_place else "")


COMMANDS = {"quota": quota, "top": top, "services": services, "create-service": create_service,
            "update-service": update_service}
