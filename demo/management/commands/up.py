"""Bring Tidal up on its embedded defaults: migrate, load the demo cluster, start the web server, a Celery
worker and Celery beat, and the profile pipeline (the simulated cluster's metrics exporter, the
Prometheus -> Kafka publisher, the Flink profile job on a local mini-cluster, the profile sink); print the
console URL and logins; Ctrl-C stops everything it started.

With --kubernetes the loops act on the real control plane platform/stack.sh starts (TIDAL_KUBECONFIG, from
`stack.sh env`) instead of the simulated cluster: the demo's nodes are registered there as kwok nodes first
(docs/how-to/kubernetes.md#the-demo-on-kubernetes)."""
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from cluster.backend import BackendError, BackendUnavailable
from cluster.simulated.exporter import register_target, target_file, target_name
from colocation.selectors import node_views
from core import telemetry
from demo.data import DEMO_PASSWORD, OPERATOR, USERS


def demo_env(environ: Mapping[str, str], run_dir: Path) -> dict[str, str]:
    """What the web server, worker and beat run with: DEBUG off (a 404 lists no URLs, a 500 shows no traceback) over
    plain HTTP on this machine, with this install's secret key; each unless the environment says otherwise."""
    env = {"DJANGO_DEBUG": "0", "TIDAL_HTTPS": "0", **environ}
    if env["DJANGO_DEBUG"] != "1" and not env.get("DJANGO_SECRET_KEY"):
        env["DJANGO_SECRET_KEY"] = install_secret_key(run_dir)
    return env


def install_secret_key(run_dir: Path) -> str:
    """The install's secret key, made at its first start in `run_dir` (.run/, which git ignores), for its owner only:
    sessions and password-reset links survive a restart, and no two installs share a key."""
    path = run_dir / "secret-key"
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(secrets.token_urlsafe(50))
    except FileExistsError:
        pass
    return path.read_text().strip()


def debug_notice(*, debug: bool) -> str | None:
    """The one start-up line that says error pages show tracebacks (DJANGO_DEBUG=1 asked for it)."""
    if not debug:
        return None
    return ("DEBUG is on (DJANGO_DEBUG=1): error pages show tracebacks and a 404 lists the URLs; never on a machine "
            "others reach (docs/reference/configuration.md)")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# How a child is asked to stop; by default SIGTERM to its whole process group.
# - Flink's Python process cancels its job through its JVM, which PyFlink starts ignoring SIGINT: SIGINT to the group
#   reaches the Python side only, and the JVM exits after it. SIGTERM would stop the JVM first and the cancel with it.
# - Celery's main process stops its pool once the running tasks end (warm shutdown): SIGTERM to the pool's processes
#   too would kill those tasks mid-way (WorkerLostError), so it goes to the main process only.
STOP_SIGNALS = {"flink": signal.SIGINT}
LEADER_ONLY = {"worker"}

# kwok runs no containers: on Kubernetes the kwok log writer plays the training containers, writing the logs kwok
# serves through pods/log (docs/how-to/kubernetes.md#job-logs-on-kwok). Its log is .run/logs/pod-logs.log.
def kubernetes_children(python: str, run: Path) -> dict[str, list[str]]:
    return {"pod-logs": [python, "-m", "cluster.simulated.kwok_logs", "--kubeconfig", settings.TIDAL_KUBECONFIG,
                         "--namespace", settings.TIDAL_K8S_NAMESPACE, "--dir", str(run / "pod-logs")]}


# The demo's trace arrives this many times faster than the trace alone on Kubernetes (TIDAL_DEMO_LOAD_FACTOR; 20 on
# the simulated cluster): there every pod costs API requests (create, then its log and its deletion when it ends), and
# a control plane sharing two cores answered one in 50-90 ms, so at 20 a scheduler tick made 100-500 of them, held
# the cluster lock 20-60 s and the other loops skipped their ticks.
KUBERNETES_LOAD_FACTOR = "4"


def _stop_signal(child: str) -> signal.Signals:
    return STOP_SIGNALS.get(child, signal.SIGTERM)


def _ask_to_stop(name: str, pid: int) -> None:
    (os.kill if name in LEADER_ONLY else os.killpg)(pid, _stop_signal(name))


class Command(BaseCommand):
    help = "Run Tidal locally: web server, Celery worker and beat on the demo cluster."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("TIDAL_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("TIDAL_PORT", "8000")))
        parser.add_argument("--all-nodes", action="store_true", help="load every node of the trace, not 1 in 10")
        parser.add_argument("--no-demo", action="store_true", help="do not load the demo cluster")
        parser.add_argument("--no-pipeline", action="store_true",
                            help="do not start the profile pipeline (exporter, publisher, Flink job, sink)")
        parser.add_argument("--exit-after", type=float, default=0, help="stop after N seconds (smoke tests)")
        parser.add_argument("--kubernetes", action="store_true",
                            default=settings.TIDAL_CLUSTER_BACKEND == "kubernetes",
                            help="act on the control plane of platform/stack.sh (TIDAL_KUBECONFIG): the demo's nodes "
                                 "become kwok nodes there")

    def handle(self, *args, host, port, all_nodes, no_demo, no_pipeline, exit_after, kubernetes, **options):
        # Ctrl-C and `kill` both stop what we started, even when our parent left SIGINT ignored (`cmd &`).
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _interrupt)
        self._check_port_free(host, port)
        if kubernetes and not settings.TIDAL_KUBECONFIG:
            raise CommandError("--kubernetes needs TIDAL_KUBECONFIG: eval \"$(bash platform/stack.sh env)\" first "
                               "(make run ARGS=--kubernetes does)")
        env = demo_env(os.environ, Path(settings.RUN_DIR))
        if notice := debug_notice(debug=env["DJANGO_DEBUG"] == "1"):  # first, before the slow start
            self.stdout.write(self.style.WARNING(notice))
        logs = Path(settings.RUN_DIR) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        call_command("migrate", verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        if not no_demo:
            call_command("load_demo", all_nodes=all_nodes, stdout=self.stdout)
        if kubernetes:
            self._register_kwok_nodes()
        web_target = telemetry.web_target(settings.TIDAL_REDIS_NAMESPACE)
        children = self._start(host, port, logs, env, demo_workload=not no_demo, pipeline=not no_pipeline,
                               kubernetes=kubernetes)
        try:
            self._wait_ready(f"http://{host}:{port}/api/schema/", children)
            # Prometheus scrapes Tidal's own /metrics: the operators' dashboards read their history there.
            register_target(settings.PROMETHEUS_SD_DIR, port, web_target,
                            host="127.0.0.1" if host in ("0.0.0.0", "::") else host)
            url = f"http://{host}:{port}/"
            self.stdout.write(self.style.SUCCESS(f"Tidal is up: {url}  (API {url}api/docs/, admin {url}admin/)"))
            self.stdout.write(f"sign in as {OPERATOR[0]} / {OPERATOR[1]} (operator) or "
                              f"{', '.join(u for u, _, _ in USERS)} / {DEMO_PASSWORD}; logs in {logs}; Ctrl-C stops")
            self._supervise(children, exit_after)
        except KeyboardInterrupt:  # Ctrl-C at any moment is a clean stop
            self.stdout.write("\nstopping…")
        finally:
            target_file(settings.PROMETHEUS_SD_DIR, web_target).unlink(missing_ok=True)
            self._stop(children)

    @staticmethod
    def _check_port_free(host: str, port: int) -> None:
        with socket.socket() as probe:
            if probe.connect_ex((host, port)) == 0:
                raise CommandError(f"{host}:{port} is already in use; choose another with --port or TIDAL_PORT")

    def _register_kwok_nodes(self) -> None:
        """The inventory's nodes as kwok nodes on the control plane, and the namespaces Tidal works in."""
        from kubernetes import config  # seconds to import: only here, never on the simulated demo's way

        from cluster.kubernetes.kwok import register_nodes

        api = config.new_client_from_config(config_file=settings.TIDAL_KUBECONFIG)
        try:
            done = register_nodes(api, node_views(), (settings.TIDAL_K8S_NAMESPACE, settings.TIDAL_K8S_LEASE_NAMESPACE))
        except (BackendError, BackendUnavailable) as error:
            raise CommandError(f"cannot register the demo's nodes on {api.configuration.host}: {error}") from None
        finally:
            api.close()
        self.stdout.write(f"Kubernetes at {api.configuration.host}: {done.created} kwok nodes registered, {done.kept} "
                          f"there already; pods in namespace {settings.TIDAL_K8S_NAMESPACE}")
        if done.others:
            self.stdout.write(self.style.WARNING(
                f"{len(done.others)} other Tidal nodes are on the cluster ({', '.join(done.others[:3])}…): the loops "
                "see them too (a node of a group or GPU model Tidal does not know is left out)"))

    def _start(self, host: str, port: int, logs: Path, env: dict[str, str], demo_workload: bool, pipeline: bool,
               kubernetes: bool) -> dict[str, subprocess.Popen]:
        python = sys.executable
        demo = "1" if demo_workload else "0"  # the demo's training jobs and its inference traffic
        env = {**env, "TIDAL_DEMO_WORKLOAD": demo, "TIDAL_DEMO_TRAFFIC": demo}
        if kubernetes:
            env["TIDAL_CLUSTER_BACKEND"] = "kubernetes"
            env.setdefault("TIDAL_DEMO_LOAD_FACTOR", KUBERNETES_LOAD_FACTOR)
        # Notification e-mail is printed to the worker's log unless a real backend is configured
        # (docs/concepts/notifications.md#events-and-channels).
        env.setdefault("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
        celery = [python, "-m", "celery", "-A", "tidal"]
        commands = {
            "web": [python, "-m", "gunicorn", "tidal.wsgi", "-c", "python:tidal.gunicorn", "--bind", f"{host}:{port}",
                    "--access-logfile", "-"],
            "worker": celery + ["worker", "--loglevel", "INFO", "--concurrency", "2", "--hostname", "tidal@%h"],
            "beat": celery + ["beat", "--loglevel", "INFO", "--schedule", str(logs.parent / "celerybeat-schedule")],
        }
        if pipeline:
            manage = [python, "manage.py"]
            commands |= {
                "exporter": manage + ["cluster_exporter"],
                # Only this demo's pods, should other demos' exporters share the Prometheus.
                "publisher": manage + ["publish_metrics", "--selector",
                                       f'service="{target_name(settings.TIDAL_REDIS_NAMESPACE)}"'],
                "flink": [python, "-m", "streaming.flink"],
                "sink": manage + ["profile_sink"],
            }
        if kubernetes:
            commands |= kubernetes_children(python, logs.parent)
        children = {}
        for name, command in commands.items():
            log = open(logs / f"{name}.log", "ab")
            # A new session per child: Ctrl-C in the terminal reaches us, and we stop them in order.
            children[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                              cwd=settings.BASE_DIR, env=env)
            self.stdout.write(f"started {name} (pid {children[name].pid}), log {log.name}")
        return children

    def _wait_ready(self, url: str, children: dict[str, subprocess.Popen], note_every_s: float = 60) -> None:
        """Until the web server answers, for as long as every child is alive: two cores at load 20 boot Flink's JVM,
        the loops and four web workers for minutes, so any fixed limit was too short somewhere; a child that exits
        ends the wait (and up) at once, naming its log."""
        started = noted = time.monotonic()
        while True:
            self._check_alive(children)
            try:
                with urllib.request.urlopen(url, timeout=15):
                    return
            except OSError:
                time.sleep(0.3)
            if time.monotonic() - noted >= note_every_s:
                noted = time.monotonic()
                self.stdout.write(f"waiting for the web server at {url} ({noted - started:.0f} s so far; every child "
                                  f"is alive; .run/logs/web.log says what it does)")

    def _supervise(self, children: dict[str, subprocess.Popen], exit_after: float) -> None:
        deadline = time.monotonic() + exit_after if exit_after else None
        while deadline is None or time.monotonic() < deadline:
            self._check_alive(children)
            time.sleep(0.5)

    @staticmethod
    def _check_alive(children: dict[str, subprocess.Popen]) -> None:
        for name, child in children.items():
            if child.poll() is not None:
                raise CommandError(f"{name} exited with code {child.returncode}; see .run/logs/{name}.log")

    def _stop(self, children: dict[str, subprocess.Popen], grace_s: float = 20) -> None:
        """Every child asked to stop at once (_ask_to_stop), then one shared grace period before SIGKILL to its group
        (a JVM or a Celery warm shutdown must not stretch Ctrl-C by 15 s per child)."""
        for name, child in children.items():
            if child.poll() is None:
                _ask_to_stop(name, child.pid)
        deadline = time.monotonic() + grace_s
        for name, child in children.items():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                self.stdout.write(f"killed {name} (no exit within {grace_s:.0f} s of {_stop_signal(name).name})")
            self.stdout.write(f"stopped {name}")
