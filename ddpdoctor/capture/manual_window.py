"""``ddpdoctor.capture.window()``: the script marks the profiled window itself.

    from ddpdoctor.capture import window

    for step, (x, y) in enumerate(loader):
        if step == 100:
            with window():                       # the steps inside the block are recorded
                ...

Works in a rank captured by ``ddpdoctor run`` or by ``DDPDOCTOR_CAPTURE``; ``window(DIR)`` switches the
capture on from inside the script (as ``DDPDOCTOR_CAPTURE=DIR`` would).  Elsewhere (no capture) it does
nothing and says so in the handle (``.recording`` is False), so the script runs the same with and without
ddpdoctor.  Importing it turns the automatic window off in this rank (agent/window.py ``manual``).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

from .env_switch import AGENT_MODULE


@dataclass
class WindowHandle:
    recording: bool  # the block is being profiled
    bundle: str | None  # where the trace goes (DIR/ranks/rank<R>/)
    why_not: str = ""  # when not recording: why


def _agent():
    return getattr(sys.modules.get(AGENT_MODULE), "AGENT", None)


def claim() -> None:
    """No automatic window in this rank from now on (the script marks it)."""
    agent = _agent()
    if agent is not None:
        agent.take_manual_window()


@contextlib.contextmanager
def window(out: str | None = None):
    """Profile the training steps inside the block (every optimizer step in it is one recorded step;
    enter the block at the start of a step).  ``out``: capture into this folder when no capture is on."""
    agent = _agent()
    if agent is None and out:
        from .env_switch import start

        start(str(out))
        agent = _agent()
    if agent is None:
        yield WindowHandle(
            False, None, "no capture in this process (neither `ddpdoctor run` nor DDPDOCTOR_CAPTURE nor window(DIR))"
        )
        return
    recording = agent.mark_window_start()
    handle = WindowHandle(
        recording, agent.bundle, "" if recording else "this rank's one window already ran (automatic or marked)"
    )
    try:
        yield handle
    finally:
        agent.mark_window_end()
