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


# what gloo's surviving ranks print when the others stop (the transport's errors, and the C++ abort that
# may follow); after the user's Ctrl-C they are teardown, not news: the terminal drops them (the logs keep them)
_GLOO_TEARDOWN = re.compile(
    rb"Connection closed by peer|Connection reset by peer|Broken pipe|gloo::IoException|"
    rb"terminate called after throwing an instance of 'gloo::|third_party/gloo/gloo/transport/"
)
_PREFIX = re.compile(rb"^\s*(?:\[(?:default|rank)\d+\]:\s?)*")
_CHAINING = (b"During handling of the above exception", b"The above exception was the direct cause")
_MAX_HELD = 400  # lines of one traceback held back to judge it; a longer one is shown as it is


class TeardownFilter:
    """Once ``stopped`` (an Event) is set, drops gloo's teardown lines, and whole tracebacks that end in
    one (held per rank prefix, "[rank1]:", as ranks share a stream); before that, and for every other
    line, passes what it is given. Fed whole lines."""

    def __init__(self, stopped):
        self.stopped, self.held = stopped, {}
        self.dropped: set = set()  # prefixes whose last traceback was dropped: its chaining line goes too

    def _chained(self, who: bytes, body: bytes) -> bool:
        """A blank line or "During handling of the above exception…" right after a dropped traceback."""
        if not self.dropped:
            return False
        if not body.strip() or (who in self.dropped and body.startswith(_CHAINING)):
            return True
        self.dropped.discard(who)
        return False

    def active(self) -> bool:
        return self.stopped.is_set() or bool(self.held)

    def feed(self, line: bytes) -> bytes:
        if not self.active():
            return line
        m = _PREFIX.match(line)
        who, body = m.group(0).strip(), line[m.end() :]
        if self._chained(who, body):
            return b""
        held = self.held.get(who)
        if held is not None:
            held.append(line)
            if body.strip() and not body[:1].isspace() and not body.startswith(b"Traceback"):
                block = b"".join(self.held.pop(who))  # the exception line ends the traceback
                if not _GLOO_TEARDOWN.search(body):
                    return block
                self.dropped.add(who)
                return b""
            return b"".join(self.held.pop(who)) if len(held) > _MAX_HELD else b""
        if body.startswith(b"Traceback (most recent call last)"):
            self.held[who] = [line]
            return b""
        return b"" if _GLOO_TEARDOWN.search(body) else line

    def flush(self) -> bytes:
        blocks, self.held = self.held, {}
        return b"".join(b"".join(b) for b in blocks.values())


class _NoiseFilter:
    """The terminal side of a rank stream, line by line without Kineto's chatter (the log file keeps every
    byte). A partial line is written at once (progress bars) unless it may be the start of such a message."""

    def __init__(self, term, stopped=None):
        self.term, self.pending = term, b""
        self.teardown = TeardownFilter(stopped) if stopped is not None else None

    def _line(self, line: bytes) -> bytes:
        line = strip_profiler_noise(line)
        return self.teardown.feed(line) if self.teardown is not None and line else line

    def write(self, data: bytes) -> None:
        buf = self.pending + data
        lines = buf.split(b"\n")
        self.pending = lines.pop()
        out = b"".join(self._line(ln + b"\n") for ln in lines)
        tail = self.pending.lstrip(b"[]defaultrank0123456789: ")
        holding = self.teardown is not None and self.teardown.active()  # whole lines only, in order
        if (
            self.pending
            and not holding
            and not any(tail.startswith(p[: len(tail)]) or p in self.pending for p in _NOISE_STARTS)
        ):
            out, self.pending = out + self.pending, b""
        if out:
            self.term.write(out)

    def flush(self) -> None:
        self.term.flush()

    def close(self) -> None:
        last = self._line(self.pending) if self.pending else b""
        self.pending = b""
        held = self.teardown.flush() if self.teardown is not None else b""  # a traceback cut short: shown
        if last + held:
            self.term.write(last + held)
        self.term.flush()


class Pump(threading.Thread):
    """Copies one stream to the terminal (without profiler chatter) and, optionally, a log file (all of it)."""

    def __init__(self, src_fd: int, term, log_fh=None, lock=None, stopped=None):
        """``term`` None: the log file only (the launcher's own output). ``stopped`` (an Event, set at the
        user's Ctrl-C): from then on gloo's teardown noise is kept off the terminal (TeardownFilter)."""
        super().__init__(daemon=True)
        self.src_fd, self.log_fh, self.lock = src_fd, log_fh, lock
        self.term = _NoiseFilter(term, stopped) if term is not None else None

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
