"""The embedded demo: what `make run` loads, and `manage.py up` serving it and stopping cleanly."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from colocation.models import InferenceService, Node, ResourceGroup
from colocation.services import service_update
from core.models import Decision, Department
from demo.data import DEPARTMENTS, LLM_SERVICE, LLM_STARTUP_S, OPERATOR, STATIC_SHARE, demo_load
from scheduler.models import Framework, Quota

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(settings.TRACES_DIR)


@pytest.mark.django_db
def test_demo_loads_one_node_in_ten_of_the_trace_and_is_idempotent():
    first = demo_load(traces_dir=TRACES)
    counts = (Node.objects.count(), Quota.objects.count(), Framework.objects.count())
    second = demo_load(traces_dir=TRACES)
    assert first.nodes == second.nodes == 153  # 1,523 trace nodes, every 10th
    assert (Node.objects.count(), Quota.objects.count(), Framework.objects.count()) == counts
    assert set(ResourceGroup.objects.values_list("name", flat=True)) >= {"t4", "g2", "cpu"}
    assert Node.objects.filter(pool="fixed").count() >= ResourceGroup.objects.count()  # each group keeps some
    own_t4 = [Quota.objects.get(department__name=d, gpu_model__name="T4").own for d in DEPARTMENTS]
    assert own_t4 == sorted(own_t4, reverse=True) and own_t4[0] > own_t4[-1]  # Helios shares, largest first


@pytest.mark.django_db
def test_demo_without_traces_loads_the_built_in_cluster(tmp_path):
    summary = demo_load(traces_dir=tmp_path)
    assert "built-in" in summary.source and summary.nodes == 14
    assert Department.objects.count() == len(DEPARTMENTS)
    assert not InferenceService.objects.filter(name=LLM_SERVICE).exists()  # no 8-GPU group with room for it


@pytest.mark.django_db
def test_demo_seeds_an_llm_service_of_whole_node_groups_beside_the_others():
    demo_load(traces_dir=TRACES)
    llm = InferenceService.objects.get(name=LLM_SERVICE)
    g2 = InferenceService.objects.get(name="g2-serving")
    assert (llm.gpu_model.name, llm.group_size, llm.gpus_per_replica, llm.startup_s) == ("G2", 2, 8, LLM_STARTUP_S)
    assert llm.min_replicas == 2 <= llm.replicas <= llm.max_replicas
    assert (llm.ttft_p99_target_s, llm.tpot_p99_target_s) == (0.5, None)
    assert [t.metric for t in llm.thresholds.all()] == ["gpu"]
    assert Decision.objects.filter(subject=f"service:{LLM_SERVICE}", reason="service-created").count() == 1
    # valid through the service API's checks: an update that changes nothing is accepted
    service_update(service=llm, actor=get_user_model().objects.get(username=OPERATOR[0]))
    # the online G2 side carries what it carried before the LLM service: 70 % of its GPUs at the peak
    online = sum(n.gpu_count for n in Node.objects.filter(resource_group__name="g2", state="online-normal"))
    peak = float(llm.replicas * llm.group_size * llm.gpus_per_replica + g2.replicas * g2.gpus_per_replica) / online
    assert 0.6 <= peak <= STATIC_SHARE
    # a one-pod service per GPU group with room, each still on its own share of the traffic's profiles
    assert set(InferenceService.objects.values_list("name", flat=True)) == {
        "g2-serving", "p100-serving", "t4-serving", LLM_SERVICE}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Ctrl-C with the whole pipeline is test_demo_running.py's, after minutes of the demo running.
@pytest.mark.parametrize(("stop_with", "children"), [("kill", ("web", "worker", "beat"))])  # --no-pipeline
def test_up_serves_api_admin_and_docs_then_stops_cleanly(tmp_path, stop_with, children):
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}", "TIDAL_RUN_DIR": str(tmp_path),
           # Not the keys, topics or exporter port of a demo running on this machine.
           "TIDAL_REDIS_NAMESPACE": f"test-up-{port}", "TIDAL_TOPIC_PREFIX": f"test-up-{port}",
           "TIDAL_EXPORTER_PORT": str(_free_port()), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "manage.py", "up", "--port", str(port), "--exit-after", "120"]
    up = subprocess.Popen(command + (["--no-pipeline"] if stop_with == "kill" else []), cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          # started the way `make run &` is: with SIGINT ignored; up must still stop on it
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    lines: list[str] = []
    reader = threading.Thread(target=lines.extend, args=(up.stdout,), daemon=True)  # every line, as it comes
    reader.start()
    try:
        base = f"http://127.0.0.1:{port}"
        # The stop below is the Ctrl-C after start-up: once `up` has said so (on a busy machine it sees the server
        # answer well after a client does).
        _wait_until(lambda: any("Tidal is up" in line for line in lines) or up.poll() is not None, timeout=180)
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        assert b"swagger" in opener.open(f"{base}/api/docs/").read().lower()
        assert b"Django administration" in opener.open(f"{base}/admin/login/").read()
        assert b".topbar" in opener.open(f"{base}/static/frontend/console.css").read()  # static with DEBUG off
        with pytest.raises(urllib.error.HTTPError) as missing:
            opener.open(f"{base}/no-such-page/")
        page = missing.value.read()
        assert missing.value.code == 404 and b"Page not found" in page and b"URLconf" not in page
        token = _token(base, "operator", "tidal-operator")
        nodes = urllib.request.Request(f"{base}/api/nodes/?limit=1", headers={"Authorization": f"Token {token}"})
        assert b'"count":' in urllib.request.urlopen(nodes).read()
    finally:
        up.send_signal(signal.SIGTERM if stop_with == "kill" else signal.SIGINT)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.terminate()  # SIGTERM: up still stops its children (SIGKILL would orphan them)
            try:
                up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                up.kill()
            reader.join(timeout=10)
            pytest.fail(f"up did not stop within 60 s of {stop_with}:\n{''.join(lines)}")
        reader.join(timeout=10)
    output = "".join(lines)
    assert up.returncode == 0, output
    assert "Tidal is up" in output
    assert "DEBUG is on" not in output  # the demo serves with DEBUG off (DJANGO_DEBUG=1 turns it on, and says so)
    for child in children:
        assert f"stopped {child}" in output


def _wait_until(ready, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"not ready within {timeout:.0f} s"
        time.sleep(0.2)


def _token(base: str, username: str, password: str) -> str:
    data = f"username={username}&password={password}".encode()
    return json.load(urllib.request.urlopen(f"{base}/api/auth/token/", data=data))["token"]


@pytest.mark.django_db
def test_demo_workload_submits_trace_pods_as_they_come_due(world, settings, tmp_path):
    from redis import Redis

    from cluster.simulated.store import RUNTIME_LABEL
    from demo.trace_jobs import POD_LIST, demo_submit_due
    from scheduler.models import TrainingJob

    (tmp_path / POD_LIST).parent.mkdir(parents=True)
    (tmp_path / POD_LIST).write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p-early,1000,1024,1,1000,,LS,Running,100,200,100\n"  # before the start day: never submitted
        "p-a,2000,2048,1,460,,LS,Running,1000,61000,1000\n"  # t=0, runs 60000 s
        "p-zero,14000,0,1,1000,,LS,Running,1000,2000,1000\n"  # no memory (one such pod in the trace): skipped
        "p-b,4000,4096,2,1000,,BE,Running,1600,1700,1600\n"  # due 600 trace s later, runs 100 s
        "p-c,1000,1024,0,0,,BE,Pending,99999,,\n"  # never ran
    )
    settings.TRACES_DIR, settings.TIDAL_DEMO_TRACE_START_S = tmp_path, 1000
    settings.TIDAL_DEMO_SPEEDUP, settings.TIDAL_DEMO_LOAD_FACTOR = 60, 2  # arrivals 120× faster, run times 60×
    helios_share(tmp_path, big=0, held=10)  # no gangs here (test_demo_workload_submits_gangs has them)
    redis, namespace = Redis.from_url(settings.REDIS_URL), f"test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        assert demo_submit_due(redis=redis, namespace=namespace, now=1000.0) == 1
        assert demo_submit_due(redis=redis, namespace=namespace, now=1004.0) == 0  # p-b is due at 600/120 = 5 s
        assert demo_submit_due(redis=redis, namespace=namespace, now=1005.0) == 1
        assert demo_submit_due(redis=redis, namespace=namespace, now=1900.0) == 1
    finally:
        redis.delete(f"{namespace}:demo-workload")
    jobs = {j.name: j for j in TrainingJob.objects.all()}
    assert set(jobs) == {"p-a", "p-b", "p-c"}
    assert str(jobs["p-a"].gpus) == "0.460" and jobs["p-b"].gpus == 2 and jobs["p-c"].gpu_model is None
    assert jobs["p-a"].annotations[RUNTIME_LABEL] == "1000"  # 60000 s / 60
    assert jobs["p-b"].annotations[RUNTIME_LABEL] == "120"  # 100 s / 60 = 1.7 s, raised to the 2 min floor
    assert jobs["p-c"].annotations[RUNTIME_LABEL] == "300"  # never ran: 5 min
    assert jobs["p-a"].task_key == f"trace/{jobs['p-a'].department.name}/2000m-2048Mi-0.46gpu-any-LS"


def helios_share(traces: Path, *, big: int, held: int) -> None:
    """A per-VC Helios file where jobs of >= 8 GPUs hold big / held of the running GPUs."""
    vcs = traces / "helios" / "vcs"
    vcs.mkdir(parents=True)
    (vcs / "vcX.csv").write_text("time,running_gpu_num,running_gpu_num_noless_8\n"
                                 f"2020-05-01 00:00:00,{held},{big}\n")


@pytest.mark.django_db
def test_demo_workload_submits_gangs_in_the_helios_share(world, settings, tmp_path):
    from redis import Redis

    from cluster.simulated.traces import gang_workers_of
    from demo.trace_jobs import POD_LIST, demo_gangs, demo_submit_due, read_pods
    from scheduler.models import TrainingJob

    (tmp_path / POD_LIST).parent.mkdir(parents=True)
    (tmp_path / POD_LIST).write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p-frac,2000,2048,1,500,,LS,Running,1000,61000,1000\n"  # 0.5 GPU x 1000 s (60000 / 60)
        "p-g,1000,1024,1,1000,,LS,Running,1010,1070,1010\n"  # 1 GPU x 120 s (the floor): becomes the gang
    )
    helios_share(tmp_path, big=9, held=10)  # gangs should hold 90 % of the GPU-time
    settings.TRACES_DIR, settings.TIDAL_DEMO_TRACE_START_S = tmp_path, 1000
    settings.TIDAL_DEMO_SPEEDUP, settings.TIDAL_DEMO_LOAD_FACTOR = 60, 2
    path = tmp_path / POD_LIST
    plan = demo_gangs(path, 60.0, tmp_path / "helios")
    w = gang_workers_of("p-g")
    assert plan.workers == {"p-g": w} and plan.share == pytest.approx(w * 120 / (w * 120 + 500))
    assert plan.growth == pytest.approx((w * 120 + 500) / (120 + 500))
    assert plan.of(read_pods(path)[0]) == 1
    redis, namespace = Redis.from_url(settings.REDIS_URL), f"test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        assert demo_submit_due(redis=redis, namespace=namespace, now=1000.0) == 1
        # p-g is 10 trace s later: 10 / 120 s, spread by the gangs' growth of the GPU-time
        assert demo_submit_due(redis=redis, namespace=namespace, now=1000.0 + 10 / 120 * plan.growth - 0.01) == 0
        assert demo_submit_due(redis=redis, namespace=namespace, now=1000.0 + 10 / 120 * plan.growth + 0.01) == 1
    finally:
        redis.delete(f"{namespace}:demo-workload")
    gang = TrainingJob.objects.get(name="p-g")
    # at most what its model's nodes hold and all from one kind of its department's quota (conftest's world: 2 T4
    # nodes of 2 GPUs, own 2; one A100 node of 8 GPUs, own 4)
    assert gang.workers == min(w, {"T4": 2, "A100": 4}[gang.gpu_model.name]) >= 2
    assert TrainingJob.objects.get(name="p-frac").workers == 1


def test_up_names_debug_only_when_it_is_on():
    from demo.management.commands.up import debug_notice

    assert "DJANGO_DEBUG=1" in debug_notice(debug=True) and debug_notice(debug=False) is None
