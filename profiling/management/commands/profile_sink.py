"""`python manage.py profile_sink [--prefix P] [--max-idle-s N | --until-idle]`: thin; the work is in
profiling/sink.py. Stops gracefully on SIGTERM / SIGINT (finishes and commits the batch in hand)."""

from __future__ import annotations

import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from profiling.sink import ProfileSink, group_id
from streaming.topics import Topics

UNTIL_IDLE_S = 5.0


class Command(BaseCommand):
    help = "Consume the profile topics (job minutes, service minutes, late samples) into the profiling tables."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--prefix", default=settings.TIDAL_TOPIC_PREFIX,
                            help="topic prefix (default: settings.TIDAL_TOPIC_PREFIX); the group is <prefix>.profile-sink")
        parser.add_argument("--bootstrap", default=settings.KAFKA_BOOTSTRAP)
        idle = parser.add_mutually_exclusive_group()
        idle.add_argument("--max-idle-s", type=float, default=None,
                          help="stop once no record came for this many seconds (after joining the group)")
        idle.add_argument("--until-idle", action="store_true", help=f"--max-idle-s {UNTIL_IDLE_S:g}")
        parser.add_argument("--max-records", type=int, default=2000, help="records per batch (one transaction)")

    def handle(self, *args: object, **opts: object) -> None:
        max_idle_s = UNTIL_IDLE_S if opts["until_idle"] else opts["max_idle_s"]
        if max_idle_s is not None and max_idle_s <= 0:
            raise CommandError("--max-idle-s must be > 0")
        if opts["max_records"] < 1:
            raise CommandError("--max-records must be >= 1")
        sink = ProfileSink(bootstrap=opts["bootstrap"], topics=Topics(prefix=opts["prefix"]),
                           max_records=opts["max_records"])
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: sink.stop())
        self.stdout.write(f"profile sink: group {group_id(opts['prefix'])} on {opts['bootstrap']}")
        stats = sink.run(max_idle_s=max_idle_s)
        self.stdout.write(f"profile sink stopped: {stats}")
