"""Submitting the profile job: a planning failure from Flink's planner thread race is planned again, nothing else."""
import pytest
from py4j.protocol import Py4JJavaError

from streaming.flink import job as flink_job
from streaming.flink.job import PLANNER_RACE, PLANNING_TRIES, Runtime, submit


class JavaError(Py4JJavaError):
    """A Py4JJavaError without a gateway: its text is what str() of the real one shows."""

    def __init__(self, text: str) -> None:
        Exception.__init__(self, text)
        self.text = text

    def __str__(self) -> str:
        return self.text


RACE = JavaError(f"An error occurred while calling o738.execute.\n: java.lang.NullPointerException: {PLANNER_RACE}")


def planner(monkeypatch, outcomes):
    """_plan_and_start raising or returning each outcome in turn; the calls made."""
    calls = []

    def plan(spec, runtime):
        calls.append(spec)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(flink_job, "_plan_and_start", plan)
    return calls


def test_the_planner_race_is_planned_again_until_it_starts(monkeypatch, tmp_path):
    calls = planner(monkeypatch, [RACE, RACE, "started"])
    assert submit("spec", Runtime(checkpoint_dir=tmp_path / "chk")) == "started"
    assert len(calls) == 3 == PLANNING_TRIES and (tmp_path / "chk").is_dir()


def test_the_race_every_time_and_any_other_failure_are_raised(monkeypatch, tmp_path):
    planner(monkeypatch, [RACE] * PLANNING_TRIES)
    with pytest.raises(Py4JJavaError, match=PLANNER_RACE):
        submit("spec", Runtime(checkpoint_dir=tmp_path))
    other = JavaError("org.apache.flink.table.api.ValidationException: Table kafka_samples not found")
    calls = planner(monkeypatch, [other, "started"])
    with pytest.raises(Py4JJavaError, match="ValidationException"):
        submit("spec", Runtime(checkpoint_dir=tmp_path))
    assert len(calls) == 1  # a real error is not planned again
