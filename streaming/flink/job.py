"""Running the profile job on a PyFlink local mini-cluster: checkpoints, restore, submission.

Restart story: the job checkpoints every few seconds (Kafka offsets + open windows) and keeps the
latest checkpoint when cancelled or killed; a new submission restores from the newest one, so a
restart neither loses nor double-counts a sample. Rows emitted after that checkpoint are emitted
again, identical - the profile sink's upserts make them a no-op. Without any checkpoint the job
starts at its consumer group's committed offsets (earliest on a new group).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from streaming.flink.sql import PLANNER, Spec, ddl, inserts

ROOT = Path(__file__).resolve().parents[2]
JARS_DIR = ROOT / ".run" / "jars"  # the Kafka connector jars (platform/install.sh)
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Runtime:
    checkpoint_dir: Path
    checkpoint_interval_s: float = 5.0
    parallelism: int = 1
    jars_dir: Path = JARS_DIR


def jars(runtime: Runtime) -> str:
    found = sorted(runtime.jars_dir.glob("*.jar"))
    if not any("connector-kafka" in j.name for j in found):
        raise FileNotFoundError(f"no Flink Kafka connector jar in {runtime.jars_dir}: run platform/install.sh")
    return ";".join(j.as_uri() for j in found)


def latest_checkpoint(checkpoint_dir: Path) -> Path | None:
    """The newest completed checkpoint of any earlier run (a `chk-N` folder holding `_metadata`)."""
    newest = newest_checkpoint(checkpoint_dir)
    return newest[1] if newest else None


def newest_checkpoint(checkpoint_dir: Path) -> tuple[float, Path] | None:
    """(when it completed, epoch s; its folder) of the newest completed checkpoint. A running job deletes each
    checkpoint the next one subsumes, so one listed may be gone by the time it is read: skipped."""
    done = []
    for m in checkpoint_dir.glob("*/chk-*/_metadata"):
        try:
            done.append((m.stat().st_mtime, m.parent))
        except FileNotFoundError:
            continue
    return max(done, default=None)


def table_env(runtime: Runtime, restore: Path | None):
    from pyflink.table import EnvironmentSettings, TableEnvironment

    # The mini-cluster's JVM (PyFlink starts it once per process, on first use) compiles with C1 only: C2
    # spent more CPU compiling than it saved in jobs of minutes on two shared cores (JVM CPU measured:
    # 49 vs 39 us a sample over 600,000 samples, 6.2 vs 4.1 s for a 24,000-sample job).
    os.environ.setdefault("JVM_ARGS", "-XX:TieredStopAtLevel=1")
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    for key, value in {
        "pipeline.jars": jars(runtime),
        "pipeline.name": "tidal-profiles",
        "parallelism.default": str(runtime.parallelism),
        "python.executable": sys.executable,
        "table.local-time-zone": "UTC",
        "execution.checkpointing.interval": f"{int(runtime.checkpoint_interval_s * 1000)} ms",
        "execution.checkpointing.dir": runtime.checkpoint_dir.as_uri(),
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "execution.checkpointing.num-retained": "2",
        # A partition that gets no samples must not hold the watermark (and every window) back.
        "table.exec.source.idle-timeout": "30 s",
        # The SQL operators serialize what they keep (window buffers, state), so chained operators can pass
        # rows on without a defensive copy of each (~10% of the job's CPU in JFR profiles).
        "pipeline.object-reuse": "true",
        **PLANNER,
    }.items():
        config.set(key, value)
    if restore is not None:
        config.set("execution.state-recovery.path", restore.as_uri())
    return env


# Calcite keeps the planner's metadata provider in a thread-local of the Java thread that made the planner; a py4j
# call served by another gateway thread plans without it and fails with this NullPointerException (a known race of
# Flink's planner across threads). Nothing was submitted then, so the job is planned again on a fresh environment.
PLANNER_RACE = "metadataHandlerProvider"
PLANNING_TRIES = 3


def submit(spec: Spec, runtime: Runtime):
    """Start the job (asynchronously) from the latest checkpoint if there is one; returns its TableResult."""
    from py4j.protocol import Py4JJavaError

    runtime.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, PLANNING_TRIES + 1):
        try:
            return _plan_and_start(spec, runtime)
        except Py4JJavaError as error:
            if PLANNER_RACE not in str(error) or attempt == PLANNING_TRIES:
                raise
            log.warning("planning the profile job hit Flink's planner thread race (%s); planning it again", PLANNER_RACE)


def _plan_and_start(spec: Spec, runtime: Runtime):
    env = table_env(runtime, latest_checkpoint(runtime.checkpoint_dir))
    for statement in ddl(spec):
        env.execute_sql(statement)
    job = env.create_statement_set()
    for statement in inserts(spec):
        job.add_insert_sql(statement)
    return job.execute()
