"""A run the user interrupted is not a failed run (issue 27): the interrupt's own traces in the logs are
not the root cause, a real problem before it stays one, and the card says where it was stopped."""

import pytest

from ddpdoctor.logs.interrupt import apply_interrupt
from ddpdoctor.report.card import interrupted_line, partial_reasons


def _facts(kind, **extra):
    return {"failure.present": True, "failure.root_cause.kind": kind, "failure.root_cause.rank": 0, **extra}


@pytest.mark.parametrize(
    "facts",
    [
        _facts("exception", **{"failure.exception.type": "KeyboardInterrupt"}),
        _facts(
            "exception", **{"failure.exception.type": "torch.distributed.elastic.multiprocessing.api.SignalException"}
        ),
        _facts("killed", **{"failure.killed.signal": "SIGTERM"}),
        _facts("exit"),
    ],
)
def test_the_interrupt_itself_is_not_the_failure(facts):
    apply_interrupt(facts, {"run.interrupted_by": "SIGINT"})
    assert facts["failure.present"] is False and facts["failure.root_cause.kind"] is None
    assert facts["failure.interrupted"] is True


@pytest.mark.parametrize(
    "facts",
    [
        _facts("timeout"),
        _facts("oom"),
        _facts("busy"),
        _facts("exception", **{"failure.exception.type": "ValueError"}),
        _facts("killed", **{"failure.killed.signal": "SIGKILL"}),
    ],
)
def test_a_problem_before_the_interrupt_stays_the_cause(facts):
    kind = facts["failure.root_cause.kind"]
    apply_interrupt(facts, {"run.interrupted_by": "SIGINT"})
    assert facts["failure.present"] is True and facts["failure.root_cause.kind"] == kind


def test_without_an_interrupt_nothing_changes():
    facts = _facts("exception", **{"failure.exception.type": "KeyboardInterrupt"})
    apply_interrupt(facts, {})
    assert facts["failure.root_cause.kind"] == "exception"


def test_the_card_says_who_stopped_the_run_and_where():
    done = {"run.interrupted_by": "SIGINT", "run.interrupted_at_step": 61, "run.status": "complete"}
    assert interrupted_line(done) == "interrupted by you (Ctrl-C) at step 61, after the recorded window"
    early = {"run.interrupted_by": "SIGTERM", "run.interrupted_at_step": 0, "run.status": "partial"}
    assert (
        interrupted_line(early) == "stopped by SIGTERM before the first step, before the recorded window was complete"
    )
    d = {"facts": done, "analysis": {"world_size": 2, "ranks_present": [0, 1]}, "warnings": []}
    assert partial_reasons(d) == [interrupted_line(done)]
