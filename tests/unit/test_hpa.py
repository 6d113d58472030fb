"""The Kubernetes HPA v2 baseline (colocation/policy/hpa.py): tolerance, scale-up (with starting pods),
the 5-minute scale-down stabilization window, the default scale-up limit and the bounds."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from colocation.policy.hpa import HpaSpec, Recommendation, decide, replicas_for_metric

SPEC = HpaSpec(target=0.6, min_replicas=2, max_replicas=20)
OLD = (Recommendation(-1000.0, 1),)  # a history whose only entry lies outside every window


@pytest.mark.parametrize("current, ready, util, want", [
    (4, 4, 0.64, 4),  # ratio 1.07: within the 0.1 tolerance, no change
    (4, 4, 0.56, 4),  # ratio 0.93: within tolerance
    (4, 4, 0.90, 6),  # ratio 1.5: ceil(1.5 × 4)
    (4, 4, 0.30, 2),  # ratio 0.5: ceil(0.5 × 4)
    (6, 4, 0.90, 6),  # 2 starting pods at 0 %: rebalanced ratio 1.0, within tolerance: wait for them
    (6, 4, 1.00, 7),  # rebalanced ratio 1.11: ceil(1.11 × 6)
    (6, 4, 0.30, 2),  # scale-down: starting pods are not rebalanced, ceil(0.5 × 4)
    (4, 0, 1.00, 4),  # no ready pod, no metric: keep the count
])
def test_replica_calculator(current, ready, util, want):
    assert replicas_for_metric(current, ready, util, 0.6) == want


@pytest.mark.parametrize("current, util, history, want", [
    (4, 0.64, OLD, 4),  # within tolerance
    (4, 0.90, OLD, 6),  # scale up at once (no scale-up stabilization by default)
    (2, 1.00, OLD, 4),  # raw ceil(1.67 × 2) = 4, within the default limit max(2 × 2, 2 + 4) = 6
    (10, 0.30, OLD, 5),  # scale down: nothing higher in the window
    (10, 0.30, (Recommendation(-120.0, 9),), 9),  # held by the highest recommendation of the last 300 s
    (10, 0.30, (Recommendation(-300.0, 9),), 5),  # a recommendation exactly 300 s old has left the window
    (10, 0.30, (), 10),  # first reconcile: the current count is recorded first, so no scale-down yet
    (4, 0.03, OLD, 2),  # bounded by minReplicas
    (15, 1.00, OLD, 20),  # bounded by maxReplicas (raw 25)
])
def test_decide_table(current, util, history, want):
    d = decide(SPEC, current=current, ready=current, utilization=util, history=history, now=0.0)
    assert d.desired == want
    assert d.changes == (want != current)


def test_default_scale_up_limit_doubles_or_adds_four():
    spec = HpaSpec(target=0.1, min_replicas=1, max_replicas=100)
    assert decide(spec, current=2, ready=2, utilization=1.0, history=OLD, now=0.0).desired == 6  # raw 20
    assert decide(spec, current=10, ready=10, utilization=1.0, history=OLD, now=0.0).desired == 20  # raw 100


def test_scale_down_held_by_the_window_then_applied():
    history, current, seen = (), 10, []
    for minute in range(8):
        util = 0.6 if minute == 0 else 0.3  # load halves after the first minute: raw 5 from then on
        d = decide(SPEC, current=current, ready=current, utilization=util, history=history, now=60.0 * minute)
        history, current = d.recommendations, d.desired
        seen.append(current)
    assert seen == [10, 10, 10, 10, 10, 5, 5, 5]  # the 10 of minute 0 holds until it is 300 s old
    assert all(r.at > 60.0 * 7 - 300 for r in history)  # old recommendations are dropped


def test_message_names_the_stabilization():
    d = decide(SPEC, current=10, ready=10, utilization=0.3, history=(Recommendation(-60.0, 10),), now=0.0)
    assert d.raw == 5 and d.desired == 10 and "stabilized to 10" in d.message


def test_bad_spec_is_refused():
    with pytest.raises(ValueError):
        HpaSpec(target=0.0)
    with pytest.raises(ValueError):
        HpaSpec(target=0.5, min_replicas=5, max_replicas=4)


@given(current=st.integers(1, 60), ready=st.integers(0, 60), util=st.floats(0.0, 1.0),
       past=st.lists(st.tuples(st.floats(-600.0, 0.0), st.integers(1, 80)), max_size=8))
def test_desired_is_always_within_bounds(current, ready, util, past):
    history = tuple(Recommendation(at, n) for at, n in sorted(past))
    d = decide(SPEC, current=current, ready=min(ready, current), utilization=util, history=history, now=0.0)
    assert SPEC.min_replicas <= d.desired <= SPEC.max_replicas
