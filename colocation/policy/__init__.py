"""Pure co-location policy: node state machine, lending decisions, conversion steps, pools."""

from colocation.policy.forecast import DemandForecast, seasonal_forecast, take_back_at
from colocation.policy.group import (Converting, GroupNode, GroupView, InferencePod, PendingPod, TrainingPod,
                                     capacity)
from colocation.policy.lending import Hold, Lend, LendingDecision, LendReason, TakeBack, decide_group, decide_lending
from colocation.policy.pools import (PoolChoice, PoolReason, expected_run_s, is_long, lend_bar_s, long_bar_s,
                                     preferred_pool, requeue_after_take_back)
from colocation.policy.profile import DEFAULT, BusyWindow, LendingProfile, Thresholds
from colocation.policy.states import TRANSITIONS, Direction, Event, TransitionResult, transition
from colocation.policy.steps import (Action, Conflict, DeletePod, DetachPod, Done, EvictTraining, NodeNow, NodePod,
                                     PodKind, SetState, Step, TransitionRecord, Wait, drive, expected_after, is_final,
                                     next_action)
from colocation.policy.windows import busy_window, seconds_until

__all__ = [
    "Action", "BusyWindow", "Conflict", "Converting", "DEFAULT", "DemandForecast", "DeletePod", "DetachPod",
    "Direction", "Done",
    "Event", "EvictTraining", "GroupNode", "GroupView", "Hold", "InferencePod", "Lend", "LendReason",
    "LendingDecision", "LendingProfile", "NodeNow", "NodePod", "PendingPod", "PodKind", "PoolChoice", "PoolReason",
    "SetState", "Step", "TRANSITIONS", "TakeBack", "Thresholds", "TrainingPod", "TransitionRecord",
    "TransitionResult", "Wait", "busy_window", "capacity", "decide_group", "decide_lending", "expected_after",
    "expected_run_s", "drive", "is_final", "is_long", "lend_bar_s", "long_bar_s", "next_action", "preferred_pool",
    "requeue_after_take_back", "seasonal_forecast", "seconds_until", "take_back_at", "transition",
]
