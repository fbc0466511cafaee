"""A run the user interrupted (Ctrl-C, or SIGTERM/SIGHUP forwarded by ``ddpdoctor run``) did not fail.

Every rank then ends with a ``KeyboardInterrupt`` (or torchrun's ``SignalException``, or a SIGTERM
from torchrun), which the failure analysis would otherwise call the root cause ("Fix the
KeyboardInterrupt on rank …").  When the bundle's manifest says ``interrupted_by`` and the root cause
found is only that interrupt, the failure facts are cleared: the performance verdict of the steps
recorded before stands, and the card says "interrupted by you at step N".  A real problem found
before the interrupt (a hang the user gave up on, an OOM, a rank stuck in a collective) stays the
root cause.
"""

from __future__ import annotations

INTERRUPT_TYPES = ("KeyboardInterrupt", "SignalException")
INTERRUPT_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
FROM_THE_INTERRUPT = ("exception", "killed", "exit", "torchrun_exit", None)


def caused_by_interrupt(facts: dict) -> bool:
    """The failure the logs show is the interrupt itself."""
    kind = facts.get("failure.root_cause.kind")
    if kind not in FROM_THE_INTERRUPT:
        return False
    if kind == "exception":
        etype = str(facts.get("failure.exception.type") or "").rsplit(".", 1)[-1]
        return etype in INTERRUPT_TYPES
    if kind == "killed":
        return facts.get("failure.killed.signal") in INTERRUPT_SIGNALS
    return True


def apply_interrupt(facts: dict, known: dict) -> None:
    if not known.get("run.interrupted_by") or not caused_by_interrupt(facts):
        return
    facts.update(
        {
            "failure.present": False,
            "failure.root_cause.kind": None,
            "failure.root_cause.rank": None,
            "failure.interrupted": True,
        }
    )
