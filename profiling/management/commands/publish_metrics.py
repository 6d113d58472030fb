"""`python manage.py publish_metrics [--once] [--until EPOCH_S] [--backfill S]`: the Prometheus -> Kafka
publisher (one PodSample per pod per step on <prefix>.metrics.pods). Thin: the work is in
streaming/publisher.py; this reads settings, ensures the topics exist and stops cleanly on
SIGINT/SIGTERM (after the chunk in flight is flushed and its cursor saved)."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from streaming.publisher import Publisher, PublisherConfig
from streaming.topics import Topics, ensure_topics


@contextmanager
def _stop_on_signals(stop: object) -> Iterator[None]:
    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())  # type: ignore[attr-defined]
    except ValueError:  # not the main thread (e.g. called from a worker): no handlers
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Command(BaseCommand):
    help = "Publish per-pod metrics from Prometheus to Kafka, one record per pod per step."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="run one cycle and exit")
        parser.add_argument("--until", type=float, default=None,
                            help="exit once every step up to this epoch second is published")
        parser.add_argument("--backfill", type=int, default=0,
                            help="without a saved cursor, start this many seconds back")
        parser.add_argument("--chunk-steps", type=int, default=None)
        parser.add_argument("--max-steps", type=int, default=None, help="cap of steps per cycle")
        parser.add_argument("--selector", default=settings.TIDAL_PUBLISHER_SELECTOR,
                            help='PromQL label matchers every series must also match, e.g. namespace=~"team-.*" '
                                 "(default: every pod)")

    def handle(self, *args: object, **opts: object) -> None:
        extra = {k: opts[o] for k, o in (("chunk_steps", "chunk_steps"), ("max_steps_per_cycle", "max_steps"))
                 if opts[o] is not None}
        cfg = PublisherConfig(
            prometheus_url=settings.PROMETHEUS_URL,
            kafka_bootstrap=settings.KAFKA_BOOTSTRAP,
            redis_url=settings.REDIS_URL,
            topic_prefix=settings.TIDAL_TOPIC_PREFIX,
            step_s=settings.TIDAL_METRICS_STEP_S,
            interval_s=settings.TIDAL_PUBLISHER_INTERVAL_S,
            delay_s=settings.TIDAL_PUBLISHER_DELAY_S,
            backfill_s=opts["backfill"],
            selector=opts["selector"],
            **extra,
        )
        logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at INFO
        ensure_topics(cfg.kafka_bootstrap, Topics(cfg.topic_prefix))
        publisher = Publisher(cfg)
        try:
            with _stop_on_signals(publisher.stop_event):
                publisher.run(once=bool(opts["once"]), until_s=opts["until"])
        except Exception as exc:  # --once: report the failed cycle as a command error
            raise CommandError(f"publish_metrics: {exc}") from exc
        finally:
            publisher.close()
