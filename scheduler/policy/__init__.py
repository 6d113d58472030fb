"""Pure training-scheduler policy: `schedule(snapshot, profile, cache=the loop's CycleCache) -> CycleResult`.

No Django, DRF, Celery, kubernetes or Kafka imports here (import-linter contract).
"""

from scheduler.policy.cache import CycleCache
from scheduler.policy.cycle import schedule
from scheduler.policy.decisions import Admit, CycleDecision, CycleResult, Preempt, Reason, Reserve, StillPending, Worker
from scheduler.policy.priority import ScoreBreakdown, aging_points, score
from scheduler.policy.profile import PROFILES, Profile, QueueOrder, get_profile
from scheduler.policy.rightsizing import Request, rightsize

__all__ = [
    "PROFILES", "Admit", "CycleCache", "CycleDecision", "CycleResult", "Preempt", "Profile", "QueueOrder", "Reason",
    "Request", "Reserve", "ScoreBreakdown", "StillPending", "Worker", "aging_points", "get_profile", "rightsize", "schedule",
    "score",
]
