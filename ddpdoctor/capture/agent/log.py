"""Part of the capture agent (standard library only): the rank's event log
(``events.jsonl``) and the count of the errors the agent caught and went on from.

The agent never lets a capture problem reach the user's program, so it catches what goes wrong in
its own code.  Every such place counts here (by place and exception type, with the first message);
``settings.json`` holds the counts as ``agent_errors``, so a capture that silently lost something --
an event log that could not be written, a settings reader that failed -- says so in the bundle.
"""

from __future__ import annotations

import json
import os
import threading
import time

MAX_PLACES = 40  # distinct (place, type) pairs kept; later ones are counted under OTHER
OTHER = "(other places)"
MESSAGE_CHARS = 300


class ErrorCounter:
    """Errors counted by (place, exception type).  No lock: a count may be called from a signal handler
    that interrupted another count in the same thread; under the GIL the worst case is one lost count."""

    def __init__(self):
        self.by_place: dict = {}

    def count(self, place: str, exc: BaseException) -> None:
        kind = type(exc)
        name = f"{getattr(kind, '__module__', '')}.{getattr(kind, '__qualname__', kind.__name__)}"
        name = name[9:] if name.startswith("builtins.") else name
        key = (place, name)
        rec = self.by_place.get(key)
        if rec is None:
            if len(self.by_place) >= MAX_PLACES:
                key = (OTHER, "")
                rec = self.by_place.get(key)
            if rec is None:
                rec = {
                    "place": key[0],
                    "type": key[1] or None,
                    "count": 0,
                    "first_message": _message(exc),
                    "first_time": time.time(),
                }
                self.by_place[key] = rec
        rec["count"] += 1

    def quiet(self, place: str) -> "_Quiet":
        """``with errors.quiet("place"): ...``: an Exception inside is counted and not raised."""
        return _Quiet(self, place)

    def record(self) -> list[dict]:
        """What settings.json holds as ``agent_errors`` (in the order the places first failed)."""
        return [dict(r) for r in list(self.by_place.values())]

    def total(self) -> int:
        return sum(r["count"] for r in list(self.by_place.values()))


class _Quiet:
    __slots__ = ("errors", "place")

    def __init__(self, errors: ErrorCounter, place: str):
        self.errors, self.place = errors, place

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if kind is not None and issubclass(kind, Exception):
            self.errors.count(self.place, exc)
            return True
        return False


def _message(exc: BaseException) -> str:
    try:
        return str(exc)[:MESSAGE_CHARS]
    except Exception:  # an exception whose str() fails is still counted
        return f"<{type(exc).__name__}: str() failed>"


class EventLog:
    """``events.jsonl``: one JSON object per line, written only by the process that opened it (a
    forked child -- a DataLoader worker -- records nothing).  A line that cannot be written is counted
    as the place ``event log``."""

    def __init__(self, rank: int, pid: int, errors: ErrorCounter):
        self.rank, self.pid, self.errors = rank, pid, errors
        self.lock = threading.RLock()
        self.fh = None

    def open(self, path: str) -> None:
        self.fh = open(path, "a", buffering=1, encoding="utf-8")

    def write(self, kind: str, fields: dict) -> None:
        if os.getpid() != self.pid:
            return
        rec = {"time": time.time(), "rank": self.rank, "kind": kind}
        rec.update(fields)
        try:
            line = json.dumps(rec, default=str) + "\n"
            with self.lock:
                if self.fh is not None:
                    self.fh.write(line)
                    self.fh.flush()
        except Exception as exc:  # counted: settings.json shows the log lost lines
            self.errors.count("event log", exc)
