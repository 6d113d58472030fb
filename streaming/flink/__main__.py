"""`python -m streaming.flink`: run the profile job until SIGTERM/SIGINT (make run starts it).

Configuration comes from the environment (platform/stack.sh env): KAFKA_BOOTSTRAP, TIDAL_TOPIC_PREFIX, and
TIDAL_PROFILE_LATENESS_S (how far out of order a sample may arrive and still count: 120 s; a minute's profile
row leaves the job that long after the minute ends).
A stop cancels the job; its latest checkpoint stays, and the next start restores from it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time
from pathlib import Path

from streaming.flink.job import ROOT, Runtime, submit
from streaming.flink.sql import Spec, plan_id
from streaming.topics import Topics, ensure_topics

log = logging.getLogger("streaming.flink")
FINAL = {"FINISHED", "FAILED", "CANCELED"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    parser.add_argument("--prefix", default=os.environ.get("TIDAL_TOPIC_PREFIX", "tidal"))
    parser.add_argument("--lateness-s", type=int, default=int(os.environ.get("TIDAL_PROFILE_LATENESS_S", "120")))
    parser.add_argument("--checkpoint-dir", type=Path,
                        help="default .run/flink/<prefix>/<hash of the job's SQL>: a changed job never restores "
                             "a checkpoint of another plan")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    topics = Topics(args.prefix)
    ensure_topics(args.bootstrap, topics)
    spec = Spec(bootstrap=args.bootstrap, topics=topics, group_id=f"{args.prefix}.flink-profiles",
                lateness_s=args.lateness_s)
    runtime = Runtime(checkpoint_dir=args.checkpoint_dir or ROOT / ".run" / "flink" / args.prefix / plan_id(spec))
    result = submit(spec, runtime)
    client = result.get_job_client()
    log.info("profile job %s running (checkpoints in %s)", client.get_job_id(), runtime.checkpoint_dir)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    while not stop:
        status = client.get_job_status().result().name
        if status in FINAL:
            raise SystemExit(f"profile job ended: {status}")
        time.sleep(1)
    client.cancel().result()
    log.info("profile job cancelled; its last checkpoint is kept for the next start")


if __name__ == "__main__":
    main()
