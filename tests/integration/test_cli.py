"""The `tidal` command (its main() in this process; .venv/bin/tidal in a subprocess for login, the exit code of a
missing login and logs -f) against a live server on the test database: log in, submit
(a bad job file's field errors and exit 2, nothing written), ls, describe (the pending sentence), cancel, logs -f,
quota, top, services; every `-o json` parses; the exit codes scripts rely on."""
import json
import queue
import stat
import subprocess
import threading
import time
import uuid

import pytest
import yaml
from redis import Redis

from cluster.simulated import store
from core import telemetry
from core.api.throttling import SignInThrottle
from scheduler.models import JobStatus, TrainingJob
from tests.integration.livecluster import tick
from tests.integration.tidalcli import TIDAL, Tidal

GOOD = """\
name: bert-small
image: registry/bert:2
command: [python, train.py, --epochs, 3]
framework: pytorch-2.1
gpu_model: T4
gpus: 1
cpu: 4
memory: 16Gi
"""
BAD = """\
name: bert-small
department: ml-search
image: registry/bert:2
command: python train.py
framework: tensorflow-9.9
gpu_model: T4
gpus: 1.5
cpu: 4
memory: 16Gi
"""


@pytest.fixture
def tidal(live_server, world, tmp_path, monkeypatch, settings):
    # Every test signs in as mia: more than the sign-in throttle's 10 a minute per name, counted across the session
    # (the throttle has tests of its own). The live server's threads run in this process.
    monkeypatch.setattr(SignInThrottle, "rate", "1000/min", raising=False)
    settings.TIDAL_REDIS_NAMESPACE = f"test-cli-{uuid.uuid4().hex[:8]}"  # no other run's cluster figures
    return Tidal(live_server.url, tmp_path)


def test_login_keeps_the_token_in_a_0600_file(tidal):
    refused = tidal.login(password="wrong")
    assert refused.returncode == 4 and "login refused" in refused.stderr
    assert not (tidal.home / "tidal" / "config.json").exists()
    result = tidal.subprocess("login", tidal.url, "--username", "mia", "--password-stdin", input="pw\n")
    assert result.returncode == 0, result.stderr  # the installed entry point, in a process of its own
    saved = tidal.home / "tidal" / "config.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert json.loads(saved.read_text())["url"] == tidal.url
    assert "mia" in tidal("whoami").stdout and tidal.json("whoami")["username"] == "mia"


def test_not_logged_in_is_exit_4(tidal):
    result = tidal.subprocess("ls")
    assert result.returncode == 4 and "tidal login" in result.stderr
    tidal.env.update(TIDAL_URL=tidal.url, TIDAL_TOKEN="not-a-token")
    assert tidal("ls").returncode == 4


def test_a_bad_job_file_prints_the_field_errors_and_writes_nothing(tidal, world):
    assert tidal.login().returncode == 0
    (tidal.home / "bad.yaml").write_text(BAD)
    before = world.snapshot()
    result = tidal("submit", "-f", "bad.yaml")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("error: the job was not submitted")
    named = {line.split()[0]: line for line in lines[1:]}
    assert set(named) == {"framework"}  # the first refusal: framework names nothing
    assert "bad.yaml:5" in named["framework"]
    assert world.snapshot() == before
    (tidal.home / "bad.yaml").write_text(BAD.replace("tensorflow-9.9", "pytorch-2.1"))
    result = tidal("submit", "-f", "bad.yaml")
    assert result.returncode == 2 and "bad.yaml:7" in result.stderr and "gpus" in result.stderr
    assert world.snapshot() == before


def test_a_malformed_job_file_names_its_line(tidal, world):
    assert tidal.login().returncode == 0
    (tidal.home / "job.yaml").write_text(GOOD.replace("cpu: 4", "cpu: four"))
    result = tidal("submit", "-f", "job.yaml")
    assert result.returncode == 2 and "job.yaml:7: cpu: 'four' is not a quantity" in result.stderr
    assert not TrainingJob.objects.exists()


def test_submit_ls_describe_cancel(tidal, world, cluster):
    assert tidal.login().returncode == 0
    (tidal.home / "job.yaml").write_text(GOOD)
    first = tidal.json("submit", "-f", "job.yaml")  # the department: mia's only one; gpus: 1 sent as a JSON number
    assert first["department"] == "ml-search" and first["gpus"] == "1.000" and first["cpu_milli"] == 4000
    submitted = tidal("submit", "-f", "job.yaml", "--name", "bert-waits", "--gpu-model", "A100", "--gpus", "8")
    assert submitted.returncode == 0, submitted.stderr
    second = TrainingJob.objects.get(name="bert-waits")
    assert second.memory_mib == 16384 and second.command == "python train.py --epochs 3"

    listed = tidal("ls")
    assert listed.returncode == 0
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "DEPARTMENT", "STATUS"]
    assert {row.split()[1] for row in rows} == {"bert-small", "bert-waits"}
    assert {job["id"] for job in tidal.json("ls", "--status", "pending")} == {first["id"], second.pk}

    tick(cluster)  # the first runs; the second (8 A100s, above own 4 + borrowed 2) waits, and the cycle says why
    assert TrainingJob.objects.get(pk=first["id"]).status == JobStatus.RUNNING
    described = tidal("describe", str(second.pk))
    assert described.returncode == 0, described.stderr
    shown = described.stdout.splitlines()
    sentence = tidal.json("describe", str(second.pk))["decisions"][0]["message"]
    assert "own A100 quota 0/4 used, needs 8" in sentence
    assert next(line for line in shown if line.startswith("Waiting:")).split(None, 1)[1] == sentence
    assert next(line for line in shown if line.startswith("Reason:")).split() == ["Reason:", "quota-exhausted"]
    assert next(line for line in shown if line.startswith("Queue position:")).split()[2:] == ["2", "(1", "ahead)"]
    assert [line.split() for line in shown if line.startswith("A100 GPUs")] == [
        ["A100", "GPUs", "0", "/", "4", "0", "/", "2"]]  # the numbers behind it: own 0/4, borrowed 0/2 used
    assert "Score:" in shown and "Decisions:" in shown

    cancelled = tidal("cancel", str(second.pk))
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    assert TrainingJob.objects.get(pk=second.pk).status == JobStatus.CANCELLED
    again = tidal("cancel", str(second.pk))
    assert again.returncode == 2  # a finished job: the API's 409


def test_submit_with_flags_only(tidal):
    assert tidal.login("adam").returncode == 0
    result = tidal("submit", "--name", "tiny", "--department", "ml-search", "--image", "registry/tiny:1", "--framework",
                   "pytorch-2.1", "--gpu-model", "T4", "--gpus", "0.5", "--cpu", "500m", "--memory", "512Mi", "--",
                   "python", "train.py", "--lr", "0.1")
    assert result.returncode == 0, result.stderr
    job = TrainingJob.objects.get(name="tiny")
    assert (str(job.gpus), job.cpu_milli, job.memory_mib, job.command) == ("0.500", 500, 512,
                                                                          "python train.py --lr 0.1")
    assert f"job {job.pk} submitted" in result.stdout
    refused = tidal("submit", "--name", "x", "--cpu", "lots")
    assert refused.returncode == 2 and "cpu: 'lots' is not a quantity" in refused.stderr
    assert TrainingJob.objects.count() == 1
    steady = tidal("submit", "--name", "steady", "--department", "ml-search", "--image", "registry/tiny:1",
                   "--framework", "pytorch-2.1", "--gpus", "2", "--cpu", "1", "--memory", "1Gi", "--non-preemptible",
                   "--", "python", "train.py")
    assert steady.returncode == 0, steady.stderr
    job = TrainingJob.objects.get(name="steady")
    assert (job.gpu_model, job.preemptible) == (None, False)  # any certified model, own quota only

def test_unknown_ids_are_exit_3(tidal):
    assert tidal.login().returncode == 0
    for args in (["describe", "999999"], ["cancel", "999999"], ["logs", "999999"], ["quota", "ml-nope"],
                 ["describe", "service", "nope"]):
        result = tidal(*args)
        assert result.returncode == 3, (args, result.stderr)
        assert result.stderr.startswith("error: ") and "ot found" in result.stderr
    assert tidal("describe", "bert").returncode == 2  # not an id


def test_another_departments_job_is_not_found(tidal, world):
    theirs = world.submit("outsider", department="ml-ads", name="ads-job")
    assert tidal.login().returncode == 0
    for command in ("describe", "logs", "cancel"):
        result = tidal(command, str(theirs.pk))
        assert result.returncode == 3, command
        assert f"job {theirs.pk} not found (there is none, or it is not in your departments)" in result.stderr, command


def test_every_read_parses_as_json_and_yaml(tidal, world):
    job = world.submit("member")
    world.service("ml-search", gpu_model=world.gpu_models["T4"])
    assert tidal.login("otto").returncode == 0  # an operator sees every department
    reads = [["ls"], ["ls", "--all"], ["ls", "--department", "ml-search"], ["describe", str(job.pk)], ["quota"],
             ["quota", "ml-search"], ["quota", "--tree"], ["top"], ["services"],
             ["describe", "service", "ml-search-ranker"]]
    for args in reads:
        data = tidal.json(*args)
        as_yaml = tidal(*args, "-o", "yaml")
        assert as_yaml.returncode == 0
        assert yaml.safe_load(as_yaml.stdout) == data
        assert tidal(*args).returncode == 0, args
    quota = tidal.json("quota", "ml-search")
    assert {row["resource"] for row in quota} == {"T4", "A100", "cpu", "memory"}
    top = {row["resource_group"]: row for row in tidal.json("top")}
    assert top["t4"]["nodes_online"] == 1 and top["t4"]["gpus"] is None  # no lending tick has looked yet


def test_quota_tree_draws_each_department_under_its_parent(tidal, world):
    from core.models import Department

    Department.objects.filter(name="ml-search").update(parent=Department.objects.create(name="ml", fence=True))
    world.hold(world.submit("member", gpu_model="A100", gpus="2"), gpu_model="A100")
    world.submit("member", name="waiting", gpu_model="A100", gpus="4")
    assert tidal.login("mia").returncode == 0
    drawn = tidal("quota", "--tree")
    assert drawn.returncode == 0, drawn.stderr
    lines = drawn.stdout.splitlines()
    ml = next(i for i, line in enumerate(lines) if "ml weight 1  (pool)  fenced" in line)
    search = next(i for i, line in enumerate(lines) if "ml-search weight 1" in line)
    assert search > ml and lines[search].index("ml-search") > lines[ml].index("ml")  # drawn under ml
    assert "ml-ads" not in drawn.stdout  # not a department of mia's
    assert "A100: 2/4 used · 4 waiting · fair share 6" in lines[search + 1]
    data = tidal.json("quota", "--tree", "ml-search")
    assert [n["name"] for n in data["nodes"]] == ["ml-search"] and data["capacity"]["A100"] == 8
    assert tidal("quota", "--tree", "ml-ads").returncode == 3


def test_top_shows_what_the_lending_loop_saw_per_group(tidal, world, settings):
    """Every pod's allocation per group (core.telemetry, written by the lending tick), for a member too; the jobs
    column counts the holding jobs the caller may see."""
    namespace = settings.TIDAL_REDIS_NAMESPACE
    redis = Redis.from_url(settings.REDIS_URL)
    telemetry.put_groups(redis, namespace, {"t4": {
        "gpu_capacity": 4.0, "gpu_allocated": 2.5, "gpu_fragmented": 0.5, "cpu_capacity": 64.0, "cpu_allocated": 6.5,
        "memory_capacity": 256 * 2**30, "memory_allocated": 24 * 2**30}}, time.time())
    try:
        assert tidal.login().returncode == 0
        top = {row["resource_group"]: row for row in tidal.json("top")}
        assert top["t4"] | {"observed_at": None} == top["t4"] | {
            "gpus": 4.0, "gpus_allocated": 2.5, "gpus_fragmented": 0.5, "cpu_milli": 64000, "cpu_milli_allocated": 6500,
            "memory_mib": 262144, "memory_mib_allocated": 24576, "observed_at": None}
        assert top["a100"]["gpus"] is None  # a group the loop has not seen
        table = tidal("top").stdout
        assert "2.5/4" in table and "6.5/64" in table and "24Gi/256Gi" in table and "allocated, from" in table
        assert top["t4"]["gpus_used"] is None and "gpus used: - while the profile pipeline is behind" in table
    finally:
        redis.delete(*redis.keys(f"{namespace}:*"))


def test_logs_follow_prints_lines_as_they_come(tidal, world, cluster, settings):
    settings.TIDAL_REDIS_NAMESPACE = namespace = f"test-cli-{uuid.uuid4().hex[:8]}"
    redis = Redis.from_url(settings.REDIS_URL)
    job = world.submit("member")
    job.annotations = {store.RUNTIME_LABEL: "600"}
    job.save()
    try:
        tick(cluster)
        store.save(redis, namespace, cluster[0])  # the simulated cluster as the loops leave it for readers
        pod = job.runs.get().pod
        written_before = len(cluster[0].pod_logs(pod).splitlines())
        assert tidal.login().returncode == 0
        follower = subprocess.Popen([TIDAL, "logs", str(job.pk), "-f"], env=tidal.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        lines = _lines_of(follower)
        try:
            assert lines.get(timeout=60).strip()  # the log so far, before the cluster moves on
            for seconds in (120, 600):  # the pod writes more, then ends: the stream ends, the command with it
                tick(cluster, seconds=seconds)
                store.save(redis, namespace, cluster[0])
            assert follower.wait(timeout=60) == 0, follower.stderr.read()
        finally:
            follower.kill()
        whole = cluster[0].pod_logs(pod).splitlines()
        assert len(whole) > written_before  # lines were written after the follower started…
        received = [line.rstrip("\n") for line in iter(lines.get, None)]
        assert received[-1] == whole[-1] and len(received) == len(whole) - 1  # …and it printed them (the first
        tail = tidal("logs", str(job.pk), "--tail", "2")                       # line was taken above)
        assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 2
    finally:
        for key in redis.scan_iter(f"{namespace}*"):
            redis.delete(key)


def _lines_of(process: subprocess.Popen) -> queue.Queue:
    """The process's stdout lines as they come, then None: a get() with a timeout fails instead of hanging."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines



def test_the_client_speaks_the_served_schema():
    """Every request the client makes is an operation of the OpenAPI schema (with the query parameters it sends),
    every field it reads is in the response component it reads it from, and a job file's fields are the API's."""
    from drf_spectacular.generators import SchemaGenerator

    from tidal_cli import api, jobfile

    schema = SchemaGenerator().get_schema(request=None, public=True)
    for method, path in api.ENDPOINTS:
        assert method in schema["paths"].get(path, {}), f"{method.upper()} {path} is not in the schema"
    components = schema["components"]["schemas"]
    for shape, component in api.COMPONENTS.items():
        read = set(shape.__required_keys__ | shape.__optional_keys__)
        served = set(components[component]["properties"])
        assert read <= served, f"{shape.__name__} reads {sorted(read - served)}, not in {component}"
    sent = set(components["TrainingJobInputRequest"]["properties"])
    assert set(jobfile.API_FIELDS) == sent
    queries = {("get", "/api/jobs/"): {"submitter", "department", "status", "ordering", "limit", "offset"},
               ("get", "/api/decisions/"): {"subject", "ordering", "limit", "offset"},
               ("get", "/api/inference-services/"): {"department", "limit", "offset"},
               ("get", "/api/jobs/{id}/logs/"): {"run", "worker", "tail", "follow"}}
    for (method, path), names in queries.items():
        parameters = {p["name"] for p in schema["paths"][path][method].get("parameters", []) if p["in"] == "query"}
        assert names <= parameters, f"{method.upper()} {path} takes no {sorted(names - parameters)}"


LLM = """\
name: llm
department: ml-search
gpu_model: T4
gpus_per_replica: 2
group_size: 3
replicas: 1
min_replicas: 1
max_replicas: 2
thresholds: [{metric: gpu, min_rate: 0.2, expect_rate: 0.5, max_rate: 0.8}]
"""

SIZED = """\
ttft_p99_target_s: 0.5
queue_target: 4
slo_ttft_s: 1
slo_tpot_s: 0.05
slo_min_gain: 0.1
"""



def test_create_service_refuses_a_group_no_block_holds_then_describe_lists_its_groups(tidal, world):
    from colocation.models import InferenceService, ServiceGroup
    from core.decisions import decision_record
    from core.models import Decision

    assert tidal.login("adam").returncode == 0
    (tidal.home / "llm.yaml").write_text(LLM)
    before = world.snapshot()
    result = tidal("create-service", "-f", "llm.yaml")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("error: the service was not created")
    assert lines[1].split()[0] == "group_size" and "group of 3 pods of 2 GPUs" in lines[1]
    assert world.snapshot() == before
    (tidal.home / "llm.yaml").write_text(LLM.replace("group_size: 3", "group_size: 2") + SIZED)
    result = tidal("create-service", "-f", "llm.yaml")
    assert result.returncode == 0 and "1 replicas of 2 pod(s)" in result.stdout, result.stderr
    ServiceGroup.objects.create(service=InferenceService.objects.get(name="llm"), index=0, leader="llm-0",
                                nodes=["t4-0", "t4-1"], pods_ready=2, ready=True)
    band = {"min_rate": 0.2, "expect_rate": 0.5, "max_rate": 0.8}
    decision_record(kind=Decision.Kind.SCALING, subject="service:llm", reason="hold", message="llm stays at 1",
                    data={"bands": {"gpu": {**band, "max_rate": 0.65}}, "owner_bands": {"gpu": band},
                          "band_note": "lowered for the SLO"})
    described = tidal("describe", "service", "llm")
    assert described.returncode == 0, described.stderr
    assert "Groups (2 pods each, leader first):" in described.stdout
    lines = described.stdout.splitlines()
    assert next(line for line in lines if line.startswith("gpu ")).split() == ["gpu", "20%", "50%", "80%"]
    decided = next(line for line in lines if "llm stays at 1" in line)  # the console's GPU band column, in words
    assert "20%–65% (lowered for the SLO; owner's 20%–80%)" in decided, described.stdout
    assert tidal.json("describe", "service", "llm")["thresholds"][0]["max_rate"] == 0.8  # -o json: the API's own
    said = {k: v.strip() for k, _, v in (line.partition(":") for line in described.stdout.splitlines())}
    assert said["Serving targets"] == "TTFT p99 500ms, queue 4 per replica", described.stdout
    assert said["Sized to the SLO"] == "TTFT 1s, TPOT 50ms, min gain 10%"
    assert "The GPU band is moved every minute to the SLO's sizing; each decision names the band it used." \
        in described.stdout
    row = next(line for line in described.stdout.splitlines() if "llm-0" in line)
    assert row.split()[:4] == ["0", "llm-0", "t4-0,", "t4-1"] and "yes (2/2)" in row


def test_update_service_sets_the_group_restart_policy_and_describe_shows_it(tidal, world):
    """LeaderWorkerSet's restart policy (docs/concepts/service-groups.md#lifecycle): an unknown value is refused
    beside the field and changes nothing; None is shown with the restarts its groups kept in place."""
    from colocation.models import InferenceService, ServiceGroup

    service = world.service(name="llm", gpu_model=world.gpu_models["T4"], group_size=2, gpus_per_replica=2)
    assert tidal.login("adam").returncode == 0
    (tidal.home / "restart.yaml").write_text("group_restart_policy: Default\n")
    before = world.snapshot()
    result = tidal("update-service", "llm", "-f", "restart.yaml")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("error: the service was not changed") and lines[1].split()[0] == "group_restart_policy"
    assert world.snapshot() == before
    (tidal.home / "restart.yaml").write_text("group_restart_policy: None\n")
    result = tidal("update-service", "llm", "-f", "restart.yaml")
    assert result.returncode == 0 and "changed: group_restart_policy" in result.stdout, result.stderr
    assert InferenceService.objects.get(pk=service.pk).group_restart_policy == "None"
    ServiceGroup.objects.create(service=service, index=0, leader="llm-0", nodes=["t4-0", "t4-1"], pods_ready=2,
                                ready=True, pod_restarts={"llm-0-1": 1})
    described = tidal("describe", "service", "llm")
    assert described.returncode == 0, described.stderr
    said = {k: v.strip() for k, _, v in (line.partition(":") for line in described.stdout.splitlines())}
    assert said["Group restart"].startswith("None (a container restarted in place restarts alone"), described.stdout
    row = next(line for line in described.stdout.splitlines() if "llm-0" in line)
    assert row.rstrip().endswith("0 (+1 in place)"), row
