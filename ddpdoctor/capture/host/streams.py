"""The output streams under `ddpdoctor run`: each rank's copied to the terminal without the profiler's
chatter (and to the rank's log file byte for byte, by the rank's own tee); the launcher's to launcher.log only."""

from __future__ import annotations

import os
import re
import threading

# Kineto's own status lines, printed by every rank each time the profiler starts or stops:
#   STAGE:2023-02-21 15:15:48 101902:101902 ActivityProfilerController.cpp:294] Completed Stage: Warm Up
#   USDT:2026-11-22 19:06:23 1351:1351 SyncActivityProfilerHandler.cpp:52] profiler_start
# (pytorch/kineto#726; the second from torch 2.13 here). Two ranks writing at once glue them together.
_KINETO = re.compile(
    rb"(?:STAGE|USDT):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ [\w.]+:\d+\] .*?"
    rb"(?=(?:STAGE|USDT):\d{4}-|\r?\n|$)"
)
_ONLY_PREFIX = re.compile(rb"^\s*(?:\[(?:default|rank)\d+\]:\s*)*$")
_NOISE_STARTS = (b"STAGE:", b"USDT:")


def strip_profiler_noise(line: bytes) -> bytes:
    """One line (with its newline) without Kineto's status messages; b"" when nothing else was on it."""
    if b"STAGE:" not in line and b"USDT:" not in line:
        return line
    kept = _KINETO.sub(b"", line)
    return b"" if _ONLY_PREFIX.match(kept.rstrip(b"\r\n")) else kept


class _NoiseFilter:
    """The terminal side of a rank stream, line by line without Kineto's chatter (the log file keeps every
    byte). A partial line is written at once (progress bars) unless it may be the start of such a message."""

    def __init__(self, term):
        self.term, self.pending = term, b""

    def write(self, data: bytes) -> None:
        buf = self.pending + data
        lines = buf.split(b"\n")
        self.pending = lines.pop()
        out = b"".join(strip_profiler_noise(ln + b"\n") for ln in lines)
        tail = self.pending.lstrip(b"[]defaultrank0123456789: ")
        if self.pending and not any(tail.startswith(p[: len(tail)]) or p in self.pending for p in _NOISE_STARTS):
            out, self.pending = out + self.pending, b""
        if out:
            self.term.write(out)

    def flush(self) -> None:
        self.term.flush()

    def close(self) -> None:
        if self.pending:
            self.term.write(strip_profiler_noise(self.pending))
            self.pending = b""
        self.term.flush()


class Pump(threading.Thread):
    """Copies one stream to the terminal (without profiler chatter) and, optionally, a log file (all of it)."""

    def __init__(self, src_fd: int, term, log_fh=None, lock=None):
        """``term`` None: the log file only (the launcher's own output)."""
        super().__init__(daemon=True)
        self.src_fd, self.log_fh, self.lock = src_fd, log_fh, lock
        self.term = _NoiseFilter(term) if term is not None else None

    def run(self):
        while True:
            try:
                data = os.read(self.src_fd, 65536)
            except InterruptedError:
                continue
            except OSError:
                break
            if not data:
                break
            if self.log_fh is not None:
                with self.lock:
                    self.log_fh.write(data)
                    self.log_fh.flush()
            if self.term is None:
                continue
            try:
                self.term.write(data)
                self.term.flush()
            except (OSError, ValueError):
                pass
        try:
            if self.term is not None:
                self.term.close()
        except (OSError, ValueError):
            pass
        try:
            os.close(self.src_fd)
        except OSError:
            pass


def byte_stream(stream):
    return getattr(stream, "buffer", stream)
