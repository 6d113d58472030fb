"""Private PostgreSQL and Redis servers for the fault tests: each on a free port in a temporary folder, so a test can
stop and start it at will. The shared services of the stack are never touched.

    with private_postgres() as pg:          # pg.url, pg.database_url("x"), pg.stop(), pg.start()
    with private_redis() as redis_server:   # redis_server.url, .stop(), .start()

`stop()` is abrupt by default (PostgreSQL's immediate mode: every session dies with no clean shutdown; Redis'
SHUTDOWN NOSAVE), as a crash or a restart by the platform would be. Data of a stopped PostgreSQL survives (it
is on disk); a stopped Redis comes back empty, as the stack runs it (no persistence).
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(args: list[str]) -> list[str]:
    """initdb refuses to run as root: run PostgreSQL's tools as the postgres user then (as platform/stack.sh)."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    if not found:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return Path(found[-1])


def _wait(ready, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not become ready in {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


@dataclass
class PrivatePostgres:
    root: Path
    port: int

    @property
    def url(self) -> str:
        """The maintenance database `postgres` (create others with `create_database`)."""
        return self.database_url("postgres")

    def database_url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def create_database(self, name: str, template: str | None = None) -> str:
        self._psql(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return self.database_url(name)

    def start(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root}"
        subprocess.run(_as_postgres([str(_pg_bin() / "pg_ctl"), "-D", str(self.data), "-l",
                                     str(self.root / "postgres.log"), "-w", "-o", options, "start"]),
                       check=True, stdout=subprocess.DEVNULL)
        _wait(self._accepts, f"private PostgreSQL on port {self.port}")

    def stop(self, mode: str = "immediate") -> None:
        """`immediate` kills every session at once (a crash); `fast` rolls them back and shuts down cleanly."""
        subprocess.run(_as_postgres([str(_pg_bin() / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]),
                       check=True, stdout=subprocess.DEVNULL)

    def restart(self, mode: str = "immediate") -> None:
        self.stop(mode)
        self.start()

    def _accepts(self) -> bool:
        return subprocess.run([str(_pg_bin() / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                              check=False).returncode == 0

    def _psql(self, sql: str) -> None:
        subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-w", "-X", "-q",
                        "-c", sql], check=True)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A throw-away PostgreSQL cluster (trust auth for user postgres over 127.0.0.1), removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="tidal-pg-"))
    os.chmod(root, 0o755)
    data = root / "data"
    data.mkdir(mode=0o700)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(data, "postgres", "postgres")
    server = PrivatePostgres(root, free_port())
    subprocess.run(_as_postgres([str(_pg_bin() / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                                 "--encoding=UTF8", "--no-sync"]), check=True, stdout=subprocess.DEVNULL)
    server.start()
    try:
        yield server
    finally:
        if server._accepts():
            server.stop("fast")
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class PrivateRedis:
    root: Path
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        subprocess.run(["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", str(self.port),
                        "--save", "", "--appendonly", "no", "--dir", str(self.root),
                        "--logfile", str(self.root / "redis.log"), "--pidfile", str(self.root / "redis.pid")],
                       check=True, stdout=subprocess.DEVNULL)
        _wait(lambda: _answers(self.port), f"private Redis on port {self.port}")

    def stop(self) -> None:
        """SHUTDOWN NOSAVE: every client loses its connection; the data is gone (the stack runs Redis unpersisted).
        Returns once the process is gone: a closed port alone still lets open connections be served meanwhile."""
        pid = int((self.root / "redis.pid").read_text())
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(lambda: not _running(pid), f"private Redis on port {self.port} to stop")


@contextmanager
def _serving(kind, prefix: str, running) -> Iterator:
    """`kind(root, port)` started on a free port in a temporary folder; stopped (if `running(server)`) and
    removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    server = kind(root, free_port())
    server.start()
    try:
        yield server
    finally:
        if running(server):
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def private_redis() -> AbstractContextManager[PrivateRedis]:
    return _serving(PrivateRedis, "tidal-redis-", lambda server: _answers(server.port))


# --- a private Prometheus (appended by the Prometheus fault tests) ------------------------------------------------

import urllib.request  # noqa: E402 - kept with the part that uses it, appended to the module


@dataclass
class PrivatePrometheus:
    """A Prometheus of the test's own: no scrape targets, a remote-write receiver (feed it with
    tests/integration/promwrite.py), its TSDB in `root`. stop() is SIGTERM (Prometheus' own clean shutdown);
    start() again serves the same port and the same data (the WAL is replayed), as a restarted server would."""

    root: Path
    port: int
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        config = self.root / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 5s\nscrape_configs: []\n")
        log = open(self.root / "prometheus.log", "ab")  # noqa: SIM115 - the child keeps it open
        self.process = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-remote-write-receiver"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        _wait(self._ready, f"private Prometheus on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=READY_TIMEOUT_S)
        self.process = None
        _wait(lambda: not _answers(self.port), f"private Prometheus on port {self.port} to stop")

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"private Prometheus exited: see {self.root / 'prometheus.log'}")
        try:  # 503 while it replays its WAL, 200 once it answers queries
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                return answer.status == 200
        except OSError:  # refused, or an HTTPError (503)
            return False


def private_prometheus() -> AbstractContextManager[PrivatePrometheus]:
    return _serving(PrivatePrometheus, "tidal-prometheus-", lambda server: True)
