"""kube-scheduler as `bench kubernetes` runs it: the binary platform/kube/build.sh built, started by the benchmark with
a KubeSchedulerConfiguration of its own (the default profile `default-scheduler`, the client's rate limits stated),
logging JSON at verbosity 2 so that each binding is a line with its time ("Successfully bound pod to node").

The stack's own kube-scheduler (platform/stack.sh) also answers to `default-scheduler`: while the benchmark's runs it
is paused (SIGSTOP, then SIGCONT), so only one scheduler binds the benchmark's pods; the log says which pods the
benchmark's scheduler bound, and the benchmark checks that it bound every one.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BOUND = "Successfully bound pod to node"


@dataclass(frozen=True)
class ClientLimits:
    """A client's rate limit as client-go has it: a negative qps means none (the Python client Tidal uses has none)."""

    qps: float = -1
    burst: int = 0

    def describe(self) -> str:
        return "no client-side rate limit" if self.qps < 0 else f"qps {self.qps:g}, burst {self.burst}"


def scheduler_bin() -> Path:
    """The kube-scheduler binary, built once per machine (platform/kube/build.sh prints its cache directory)."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(["bash", str(root / "platform/kube/build.sh"), "bindir", "kube-scheduler"], check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1]) / "kube-scheduler"


def config_yaml(kubeconfig: str, limits: ClientLimits) -> str:
    return "\n".join([
        "apiVersion: kubescheduler.config.k8s.io/v1",
        "kind: KubeSchedulerConfiguration",
        "clientConnection:",
        f"  kubeconfig: {json.dumps(kubeconfig)}",
        f"  qps: {limits.qps:g}",
        f"  burst: {limits.burst}",
        "leaderElection:",
        "  leaderElect: false",
        "profiles:",
        "- schedulerName: default-scheduler",
        ""])


@contextmanager
def kube_scheduler(kubeconfig: str, limits: ClientLimits, workdir: Path) -> Iterator[tuple[Path, int]]:
    """A kube-scheduler running until the block ends; yields its log file and pid."""
    workdir.mkdir(parents=True, exist_ok=True)
    config, log = workdir / "kube-scheduler.yaml", workdir / "kube-scheduler.log"
    config.write_text(config_yaml(kubeconfig, limits))
    with open(log, "w") as out:
        process = subprocess.Popen([str(scheduler_bin()), "--config", str(config), "--secure-port", "0",
                                    "--logging-format", "json", "-v", "2"], stdout=out, stderr=subprocess.STDOUT)
    try:
        yield log, process.pid
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def bindings(log: Path, namespace: str) -> dict[str, tuple[float, str]]:
    """Pod name -> (the time the scheduler logged its binding, in s since the epoch; the node), for pods of
    `namespace`."""
    out: dict[str, tuple[float, str]] = {}
    with open(log) as f:
        for line in f:
            if BOUND not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            pod = entry.get("pod") or {}
            if pod.get("namespace") == namespace:
                ts = float(entry["ts"])
                out.setdefault(pod["name"], (ts / 1000 if ts > 1e11 else ts, entry.get("node", "")))
    return out


def bound_count(log: Path) -> int:
    """Bindings logged so far (cheap: the benchmark polls it while the scheduler works)."""
    with open(log, "rb") as f:
        return f.read().count(BOUND.encode())


@contextmanager
def stack_scheduler_paused(run_dir: Path) -> Iterator[int | None]:
    """The stack's kube-scheduler stopped (SIGSTOP) for the block, continued after; yields its pid (None when the
    stack did not start one here)."""
    pid = _stack_pid(run_dir / "pids" / "kube-scheduler.pid")
    if pid is None:
        yield None
        return
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)


def _stack_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    return pid if b"kube-scheduler" in cmdline else None


def cpu_seconds(pid: int) -> float:
    """User plus system CPU a process has used (/proc/<pid>/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def apiserver_pid(run_dir: Path) -> int:
    pid = int((run_dir / "pids" / "kube-apiserver.pid").read_text().split()[0])
    if b"kube-apiserver" not in Path(f"/proc/{pid}/cmdline").read_bytes():
        raise RuntimeError(f"pid {pid} of {run_dir}/pids/kube-apiserver.pid is not kube-apiserver")
    return pid
