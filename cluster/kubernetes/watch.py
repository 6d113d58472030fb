"""A list-then-watch loop of one resource in a background thread (what client-go calls a reflector), with its store.

The store keeps the last object seen per namespace/name: the backend reads it instead of listing, as client-go's
listers do. Every change also becomes Tidal's ClusterEvents through `convert`, into a buffer the live loop drains each
tick. Bookmarks advance the resourceVersion it resumes from; a 410 Gone (the server no longer has that version)
relists and diffs against what it knew, so a change missed in between still becomes an event; a broken connection is
retried with exponential backoff. A reader that finds the watch broken asks for a relist at once: a list is the one
point where the store is known to be current. Missing events can still never strand a job: terminal pods are
re-reported every tick, and the scheduler requeues jobs whose pod is gone.
"""
from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from cluster.backend import BackendUnavailable, ClusterEvent
from cluster.kubernetes.objects import meta

log = logging.getLogger(__name__)
Convert = Callable[[str, Mapping, "Mapping | None"], Iterable[ClusterEvent]]  # (type, object, previous)
Store = dict[str, Mapping]  # namespace/name (name for cluster-wide objects) -> object
T = TypeVar("T")
MAX_BUFFER = 50_000  # events kept for a loop that does not drain (terminal pods are re-reported anyway)


def version(resource_version: str | None) -> int:
    """A resourceVersion as a number to order by: the API server hands out etcd revisions, which only grow."""
    return int(resource_version or 0)


def key(obj: Mapping) -> str:
    m = meta(obj)
    return f"{m['namespace']}/{m['name']}" if m.get("namespace") else m["name"]


class _RawWatch(watch.Watch):
    """Events with the object as the server sent it (a dict): the client's Watch would also build its model classes
    from each one, which the Reflector never reads and which costs more than the JSON decode itself."""

    def unmarshal_event(self, data: str, return_type: object) -> dict | None:
        return super().unmarshal_event(data, None)


class Reflector:
    def __init__(self, name: str, list_fn: Callable, convert: Convert, *, timeout_s: int = 60,
                 backoff_s: tuple[float, float] = (0.5, 30.0), **list_kwargs) -> None:
        self.name, self._list, self._convert, self._kwargs = name, list_fn, convert, list_kwargs
        self._timeout_s, self._backoff = timeout_s, backoff_s
        self._store: Store = {}
        self._buffer: deque[ClusterEvent] = deque(maxlen=MAX_BUFFER)
        self._lock = threading.RLock()  # a relist holds it across its diff: no reader sees half of one
        self._changed = threading.Condition(self._lock)  # the store, its version or its health changed
        self._stop = threading.Event()
        self._retry = threading.Event()  # cuts a backoff short
        self._thread: threading.Thread | None = None
        self.resource_version: str | None = None
        self.relists = 0  # how often it had to relist (410 Gone, start, a reader): for tests and logs
        self._stale: str | None = "not listed yet"  # why the store may be behind the server; None: it is not
        self._relist_asked = False
        self._attempts = 0  # lists and reconnections tried, for readers waiting for the next one

    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._retry.set()

    def drain(self) -> list[ClusterEvent]:
        with self._lock:
            events = list(self._buffer)
            self._buffer.clear()
        return events

    def read(self, after: int, timeout_s: float) -> Store:
        """The store once it is current and holds resourceVersion `after` (a write of ours). A broken watch is asked
        to relist now; BackendUnavailable when that fails or the store is still behind after timeout_s."""
        self.start()
        with self._changed:
            if self._stale is not None:
                self._relist_asked = True
                self._retry.set()
            attempts = self._attempts

            def ready() -> bool:
                return self._stale is None and version(self.resource_version) >= after

            self._changed.wait_for(lambda: ready() or (self._stale is not None and self._attempts > attempts),
                                   timeout_s)
            if not ready():
                raise BackendUnavailable(f"watch {self.name}: {self._stale or 'behind our last write'}")
            return dict(self._store)

    def wait(self, found: Callable[[Store], T | None], timeout_s: float) -> T | None:
        """What `found` finds in the store, looked at after each change until it finds something or timeout_s."""
        hit: T | None = None

        def look() -> bool:
            nonlocal hit
            hit = found(self._store)
            return hit is not None

        with self._changed:
            self._changed.wait_for(look, timeout_s)
        return hit

    def _run(self) -> None:
        delay = self._backoff[0]
        while not self._stop.is_set():
            try:
                if self.resource_version is None or self._relist_asked:
                    self._relist()
                self._watch()
                delay = self._backoff[0]
            except ApiException as error:
                if error.status == 410:  # expired: relist from now, diffing against what we knew
                    log.info("watch %s: 410 %s; relisting", self.name, error.reason)
                    self.resource_version = None
                    continue
                log.warning("watch %s failed (%s %s); retrying in %.1f s", self.name, error.status, error.reason, delay)
                delay = self._failed(f"{error.status} {error.reason}", delay)
            except Exception as error:  # unreachable, reset, timeout: reconnect with backoff
                log.warning("watch %s lost (%s); retrying in %.1f s", self.name, error, delay)
                delay = self._failed(str(error), delay)

    def _failed(self, why: str, delay: float) -> float:
        with self._changed:
            self._stale = why
            self._attempts += 1
            self._changed.notify_all()
        self._retry.wait(delay)
        self._retry.clear()
        return min(delay * 2, self._backoff[1])

    def _relist(self) -> None:
        self._relist_asked = False
        response = self._list(_preload_content=False, **self._kwargs)
        body = json.loads(response.data)
        items = {key(o): o for o in body.get("items") or ()}
        with self._changed:
            if self.relists:  # a resumed watch: report what changed while we were not watching
                for name, previous in list(self._store.items()):
                    if name not in items:
                        self._apply("DELETED", previous)
                for name, obj in items.items():
                    if self._store.get(name) != obj:
                        self._apply("MODIFIED" if name in self._store else "ADDED", obj)
            else:  # the first list is the baseline, not news
                self._store = items
            self.relists += 1
            self._advance((body.get("metadata") or {}).get("resourceVersion"))

    def _watch(self) -> None:
        stream = _RawWatch().stream(self._list, resource_version=self.resource_version, allow_watch_bookmarks=True,
                                      timeout_seconds=self._timeout_s, _request_timeout=(5, self._timeout_s + 10),
                                      **self._kwargs)
        for event in stream:
            if self._stop.is_set():
                return
            obj = event["raw_object"]
            if event["type"] != "BOOKMARK":
                self._apply(event["type"], obj)
            self._advance(meta(obj).get("resourceVersion"))

    def _advance(self, resource_version: str | None) -> None:
        """The store holds everything up to this version (set after the change itself, for readers waiting on it)."""
        with self._changed:
            self.resource_version = resource_version or self.resource_version
            if self._stale is not None:
                self._stale = None
                self._attempts += 1
            self._changed.notify_all()

    def _apply(self, kind: str, obj: Mapping) -> None:
        name = key(obj)
        with self._changed:
            previous = self._store.get(name)
            if kind == "DELETED":
                self._store.pop(name, None)
            else:
                self._store[name] = obj
            self._changed.notify_all()
        events = list(self._convert(kind, obj, previous))
        if events:
            with self._lock:
                self._buffer.extend(events)
