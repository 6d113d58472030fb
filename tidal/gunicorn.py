"""gunicorn's settings for Tidal's web processes, one place for `make run`, the image and `bench api`:
`gunicorn -c python:tidal.gunicorn tidal.wsgi --bind HOST:PORT` (flags on the command line override these)."""
import gc
import os
import sys

# Two processes a core (a Django process computes on one core at a time, its GIL held), two threads each to overlap
# their database round trips: in `bench api` runs side by side on 2 cores, 4 × 2 had the lowest p99, against 2 × 4,
# 3 × 2, 3 × 4 and 4 sync workers (docs/results/2026-11-23-api-benchmark.md#what-changed). WEB_CONCURRENCY sets another count.
workers = int(os.environ.get("WEB_CONCURRENCY", 4))
worker_class = "gthread"
threads = 2
# Longer than a user's pause and than a proxy's idle timeout (nginx's is 75 s): else a client's next request can meet
# a connection the server is closing, and a POST is not retried.
keepalive = 75


def post_worker_init(worker: object) -> None:
    """Warm each worker before it takes a request (its URLconf, and the API schema once), freeze what it loaded, and
    pass the GIL on sooner.

    Importing the URLconf (every view, serializer and filter) takes about a second: without this the first users
    after a start, a deploy or a worker's restart wait for it, and every request queued behind theirs too.
    `gc.freeze()` then moves the ~175,000 objects Django and Tidal loaded out of the collector's reach: a full
    collection, every few seconds under load, walked them all and held the worker's threads 100–130 ms (15–55 ms
    now). A thread back from the database waits for the GIL at most 1 ms instead of 5 while another renders a page:
    side by side under `bench api`, a list's p99 was 68–98 ms with it and 85–110 ms without (two runs each)."""
    from django.urls import get_resolver
    from drf_spectacular.generators import SchemaGenerator

    get_resolver().url_patterns  # noqa: B018 — the import is the point
    # drf-spectacular loads its extensions on the first schema it builds, and two threads doing that at once race
    # (one gets a 500: `make run`'s readiness probe retried /api/schema/ while the first build was still running)
    SchemaGenerator().get_schema(request=None, public=True)
    gc.freeze()
    sys.setswitchinterval(0.001)
