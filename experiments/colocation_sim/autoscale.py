"""The simulation's side of inference autoscaling (docs/concepts/autoscaling.md#the-policy): it measures each service every
minute and asks the real policy (`colocation.policy.autoscaling`), as the live loop does; nothing here decides."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from colocation.policy.autoscaling import LoadMinute, ScalingPolicy, ServiceView, keep_minutes


@dataclass
class _Tracked:
    loads: deque[LoadMinute]
    changed_at: float | None = None


class Measured:
    """Per service: the minutes measured so far and when its replica count last changed."""

    def __init__(self, policy: ScalingPolicy) -> None:
        self.policy = policy
        self._by_name: dict[str, _Tracked] = {}

    def _of(self, name: str) -> _Tracked:
        tracked = self._by_name.get(name)
        if tracked is None:
            tracked = self._by_name[name] = _Tracked(deque(maxlen=keep_minutes(self.policy)))
        return tracked

    def record(self, name: str, at: float, serving: int, gpu: float) -> None:
        """One minute starting at `at`, measured with `serving` replicas at `gpu` utilization each."""
        self._of(name).loads.append(LoadMinute(at, serving, gpu=gpu))

    def view(self, name: str, replicas: int, ready: int, per_replica: float) -> ServiceView:
        tracked = self._of(name)
        return ServiceView(name, self.policy, replicas, ready, tuple(tracked.loads), tracked.changed_at,
                           per_replica=per_replica)

    def changed(self, name: str, now: float) -> None:
        self._of(name).changed_at = now
