"""The service model the trace is replayed through: identical replicas of a fixed capacity that serve only
after a start-up delay; scale-in takes effect at once."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from colocation.policy.autoscaling import SYSTEM_MIN_REPLICAS, Rates

# A GPU model server: ~1000 requests/min (about 17/s) per replica at full GPU; the World Cup 98 evaluated
# peak (~26k requests/min on the default last 14 days) then needs ~45 replicas at expectRate.
CAPACITY = 1000.0
STARTUP_MIN = 3  # minutes from creating a replica to serving (image pull, model load, readiness)
RATES = Rates(0.3, 0.6, 0.8)  # docs/concepts/autoscaling.md#the-policy: thresholds on GPU utilization: min / expect / max


@dataclass(frozen=True, slots=True)
class ServiceModel:
    capacity: float = CAPACITY  # requests/min one replica serves at utilization 1.0
    startup_min: int = STARTUP_MIN
    rates: Rates = RATES
    min_replicas: int = SYSTEM_MIN_REPLICAS

    def __post_init__(self) -> None:
        if self.capacity <= 0 or self.startup_min < 0:
            raise ValueError(f"need capacity > 0 and startup >= 0, got {self.capacity}, {self.startup_min}")

    def replicas_for(self, demand: float) -> int:
        """Replicas that run `demand` requests/min at expectRate (never under the minimum)."""
        return max(self.min_replicas, math.ceil(demand / (self.capacity * self.rates.expect_rate) - 1e-9))

    def utilization(self, demand: float, ready: int) -> float:
        """Per ready replica; above 1.0 the service is overloaded (requests queue or fail)."""
        return demand / (ready * self.capacity) if ready else (math.inf if demand > 0 else 0.0)


class Replicas:
    """The replicas of the service: each with the minute it starts serving."""

    def __init__(self, replicas: int) -> None:
        self._ready_at: list[int] = [-10**9] * replicas  # sorted

    @property
    def size(self) -> int:
        return len(self._ready_at)

    def ready(self, minute: int) -> int:
        return bisect.bisect_right(self._ready_at, minute)

    def scale(self, target: int, minute: int, startup_min: int) -> None:
        """From `minute` on: new replicas serve after `startup_min`; removals take the newest (still
        starting ones first), at once."""
        if target > self.size:
            self._ready_at.extend([minute + startup_min] * (target - self.size))
        else:
            del self._ready_at[target:]
