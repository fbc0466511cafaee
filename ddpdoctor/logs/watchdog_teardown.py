"""The watchdog's tear-down of a rank: ProcessGroupNCCL's watchdog ends a process that timed out in a collective
with an abort ("Aborted (core dumped)" after "Watchdog caught collective operation timeout"); that abort is the
consequence of the timeout, not a crash of its own."""

from __future__ import annotations

from . import patterns as P
from .model import LogEvent


def watchdog_teardown(crash: LogEvent, timeouts: list[LogEvent]) -> bool:
    """An abort (not a segfault or an uncaught C++ exception) that a timeout on the same rank precedes. An abort
    the log does not attribute (a launcher's "srun: error: … Aborted (core dumped)") is taken as the tear-down of
    a rank whose timeout precedes it in the same file."""
    # an abort (abort(), SIGABRT) is not a fault of its own when the watchdog ended a timed-out process this way
    if not P.ABORT.search(crash.text) or P.CRASH_NOT_ABORT.search(crash.text):
        return False
    if crash.rank is None:
        return any(t.file == crash.file and _before(t, crash) for t in timeouts)
    return any(t.rank == crash.rank and _before(t, crash) for t in timeouts)


def _before(a: LogEvent, b: LogEvent) -> bool:
    """a happened before b: by time when both carry one, else by line in the same file."""
    if a.time is not None and b.time is not None:
        return a.time <= b.time
    return a.file == b.file and a.line_no is not None and b.line_no is not None and a.line_no < b.line_no
