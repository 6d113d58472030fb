"""The node state machine: one table of legal transitions, everything else refused with a reason."""

import itertools

import pytest

from cluster.types import NodeState, Pool
from colocation.policy import TRANSITIONS, Event, transition
from experiments.builders.colocation import OFF_N, OFF_U, ON_N, ON_U

LEGAL = {
    (ON_N, Event.LEND): OFF_U,
    (OFF_U, Event.LEND_DONE): OFF_N,
    (OFF_N, Event.TAKE_BACK): ON_U,
    (ON_U, Event.TAKE_BACK_DONE): ON_N,
    (OFF_U, Event.ABORT_LEND): ON_N,
    (ON_U, Event.ABORT_TAKE_BACK): OFF_N,
}


def test_table_is_exactly_the_spec_transitions():
    assert TRANSITIONS == LEGAL


@pytest.mark.parametrize("state,event", list(itertools.product(NodeState, Event)))
def test_every_state_event_pair(state, event):
    result = transition(state, event)
    if (state, event) in LEGAL:
        assert result.ok and result.new_state is LEGAL[(state, event)]
    else:
        assert not result.ok
        assert result.new_state is state  # refused: unchanged
        assert state.value in result.reason and event.value in result.reason


@pytest.mark.parametrize("state,event,legal_hint", [
    (OFF_N, Event.LEND, "take-back"),  # an offline node cannot be lent again
    (ON_N, Event.TAKE_BACK, "lend"),  # nor an online node taken back
    (ON_N, Event.LEND_DONE, "lend"),  # finishing a lend that never started
    (OFF_U, Event.TAKE_BACK, "lend-done"),  # cannot reverse a half-done lend by taking back
])
def test_refusal_says_what_is_legal(state, event, legal_hint):
    result = transition(state, event)
    assert not result.ok and f"legal here: {legal_hint}" in result.reason


@pytest.mark.parametrize("state,event", [(ON_N, Event.LEND), (OFF_N, Event.TAKE_BACK)])
def test_fixed_pool_node_is_never_converted(state, event):
    result = transition(state, event, Pool.FIXED)
    assert not result.ok and "fixed-pool" in result.reason
    assert transition(state, event, Pool.COLOCATION).ok


def test_only_normal_states_receive_work_and_offline_means_training():
    assert {s for s in NodeState if s.normal} == {ON_N, OFF_N}
    assert {s for s in NodeState if s.offline} == {OFF_N, OFF_U}
