"""Part of the capture agent: a thread's own run-queue wait, the time it was runnable without a CPU.

Linux keeps it per thread in ``/proc/<pid>/task/<tid>/schedstat`` (run ns, run-queue wait ns, timeslices;
CONFIG_SCHED_INFO, on in every distribution kernel).  ``gil.Gaps`` reads the stack sampler thread's at each
of its samples: a gap in the samples that this wait covers is CPU starvation, not the GIL held by another
thread.  The timeslices tell the two apart when both happen: a thread waiting for a held GIL wakes every
switch interval (5 ms) to ask for it, each wake a timeslice whose run-queue wait falls inside the hold;
a sampler starved of CPU alone is put on a CPU once or twice in its gap.  Standard library only.
"""

from __future__ import annotations

import os

SCHEDSTAT = "/proc/thread-self/schedstat"  # run ns, run-queue wait ns, timeslices (Linux, CONFIG_SCHED_INFO)


class ThreadRunQueue:
    """The calling thread's cumulative run-queue wait (seconds runnable without a CPU), timeslices (the
    times it was put on a CPU) and time on a CPU, read with one ``pread`` of its schedstat file, opened on the first
    ``read()``: call it from the thread to measure (``/proc/thread-self`` names the opening thread).
    ``read()`` is None where the file is missing."""

    def __init__(self, path: str = SCHEDSTAT):
        self.path = path
        self.fd = None
        self.error = None
        self.first = self.last = None

    def read(self) -> tuple[float, int, float] | None:
        """(run-queue seconds, timeslices, seconds on a CPU), all cumulative, or None."""
        if self.error is not None:
            return None
        try:
            if self.fd is None:
                self.fd = os.open(self.path, os.O_RDONLY)
            fields = os.pread(self.fd, 96, 0).split()
            v = (int(fields[1]) / 1e9, int(fields[2]), int(fields[0]) / 1e9)
        except (OSError, ValueError, IndexError) as exc:
            self.error = f"{self.path}: {type(exc).__name__}"
            self.close()
            return None
        if self.first is None:
            self.first = v[0]
        self.last = v[0]
        return v

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
