"""A list-then-watch loop of one resource in a background thread (what client-go calls a reflector).

It keeps the last object seen per name and turns every change into Tidal's ClusterEvents through `convert`, into a
buffer the live loop drains each tick. Bookmarks advance the resourceVersion it resumes from; a 410 Gone (the
server no longer has that version) relists and diffs against what it knew, so a change missed in between still
becomes an event; a broken connection is retried with exponential backoff. Missing events can still never strand a
job: the backend's per-tick resync re-reports terminal pods, and the scheduler requeues jobs whose pod is gone.
"""
from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from cluster.backend import ClusterEvent
from cluster.kubernetes.objects import meta

log = logging.getLogger(__name__)
Convert = Callable[[str, Mapping, "Mapping | None"], Iterable[ClusterEvent]]  # (type, object, previous)
MAX_BUFFER = 50_000  # events kept for a loop that does not drain (the resync covers what falls off)


class Reflector:
    def __init__(self, name: str, list_fn: Callable, convert: Convert, *, timeout_s: int = 60,
                 backoff_s: tuple[float, float] = (0.5, 30.0), **list_kwargs) -> None:
        self.name, self._list, self._convert, self._kwargs = name, list_fn, convert, list_kwargs
        self._timeout_s, self._backoff = timeout_s, backoff_s
        self._seen: dict[str, Mapping] = {}
        self._buffer: deque[ClusterEvent] = deque(maxlen=MAX_BUFFER)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.resource_version: str | None = None
        self.relists = 0  # how often it had to relist (410 Gone, start): for tests and logs

    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def drain(self) -> list[ClusterEvent]:
        with self._lock:
            events = list(self._buffer)
            self._buffer.clear()
        return events

    def _run(self) -> None:
        delay = self._backoff[0]
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._relist()
                self._watch()
                delay = self._backoff[0]
            except ApiException as error:
                if error.status == 410:  # expired: relist from now, diffing against what we knew
                    log.info("watch %s: %s; relisting", self.name, error.reason)
                    self.resource_version = None
                    continue
                log.warning("watch %s failed (%s %s); retrying in %.1f s", self.name, error.status, error.reason, delay)
                delay = self._sleep(delay)
            except Exception as error:  # unreachable, reset, timeout: reconnect with backoff
                log.warning("watch %s lost (%s); retrying in %.1f s", self.name, error, delay)
                delay = self._sleep(delay)

    def _sleep(self, delay: float) -> float:
        self._stop.wait(delay)
        return min(delay * 2, self._backoff[1])

    def _relist(self) -> None:
        response = self._list(_preload_content=False, **self._kwargs)
        body = json.loads(response.data)
        items = {meta(o)["name"]: o for o in body.get("items") or ()}
        if self.relists:  # a resumed watch: report what changed while we were not watching
            for name, previous in list(self._seen.items()):
                if name not in items:
                    self._apply("DELETED", previous)
            for name, obj in items.items():
                if self._seen.get(name) != obj:
                    self._apply("MODIFIED" if name in self._seen else "ADDED", obj)
        else:  # the first list is the baseline, not news
            self._seen = items
        self.relists += 1
        self.resource_version = (body.get("metadata") or {}).get("resourceVersion")

    def _watch(self) -> None:
        stream = watch.Watch().stream(self._list, resource_version=self.resource_version, allow_watch_bookmarks=True,
                                      timeout_seconds=self._timeout_s, _request_timeout=(5, self._timeout_s + 10),
                                      **self._kwargs)
        for event in stream:
            if self._stop.is_set():
                return
            obj = event["raw_object"]
            self.resource_version = meta(obj).get("resourceVersion") or self.resource_version
            if event["type"] != "BOOKMARK":
                self._apply(event["type"], obj)

    def _apply(self, kind: str, obj: Mapping) -> None:
        name = meta(obj).get("name")
        previous = self._seen.get(name)
        if kind == "DELETED":
            self._seen.pop(name, None)
        else:
            self._seen[name] = obj
        events = list(self._convert(kind, obj, previous))
        if events:
            with self._lock:
                self._buffer.extend(events)
