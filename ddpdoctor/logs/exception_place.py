"""``failure.exception.where`` / ``.code``: where in the user's own code the root-cause exception was raised.

The innermost traceback frame outside the standard library, installed packages and ddpdoctor's capture agent
(the agent wraps the DataLoader's ``__next__``), read from the exception event's traceback (events.jsonl's
``traceback``, else the log lines above the exception line). A catalogue fix names it: a CPU allocation of a
wrong size is "at train.py:89:  batch = torch.zeros(...)", not "somewhere in rank 1's traceback".
"""

from __future__ import annotations

import re

from .model import LogEvent
from .startup import FRAME, LIBRARY_PARTS, _shown, _traceback_of

AGENT_PARTS = ("/ddpdoctor_capture_agent/",)
_PREFIX = re.compile(r"^\s*\[(?:rank|default)\d+\]:")  # torch's and torchrun's rank prefixes


def _own_frame(traceback: str) -> tuple[str, int, str] | None:
    lines = traceback.splitlines()
    frames = []
    for i, ln in enumerate(lines):
        m = FRAME.search(ln)
        if m:
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            src = _PREFIX.sub("", nxt).strip() if not FRAME.search(nxt) else ""
            frames.append((m.group("file"), int(m.group("line")), src))
    own = [f for f in frames if not any(p in f[0].replace("\\", "/") for p in LIBRARY_PARTS + AGENT_PARTS)]
    return own[-1] if own else None


def apply_exception_place(facts: dict, events: list[LogEvent], lines: list) -> None:
    """Adds the two facts when the root cause is an exception whose traceback names a frame of the user's code."""
    if facts.get("failure.root_cause.kind") != "exception":
        return
    file, no = facts.get("failure.root_cause.file"), facts.get("failure.root_cause.line_no")
    ev = next((e for e in events if e.kind == "exception" and e.file == file and e.line_no == no), None)
    if ev is None:
        return
    raw = {(ln[0], ln[1]): ln[2] for ln in lines if ln[0] == ev.file}
    by_file = {ev.file: [(ln[1], ln[2]) for ln in lines if ln[0] == ev.file]}
    frame = _own_frame(_traceback_of(ev, raw, by_file))
    if frame is None:
        return
    facts["failure.exception.where"] = f"{_shown(frame[0])}:{frame[1]}"
    if frame[2]:
        facts["failure.exception.code"] = frame[2]
