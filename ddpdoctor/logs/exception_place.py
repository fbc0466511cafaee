"""``failure.exception.where`` / ``.code``: where in the user's own code the root-cause exception was raised.

The innermost traceback frame outside the standard library, installed packages and ddpdoctor's capture agent
(the agent wraps the DataLoader's ``__next__``), read from the exception event's traceback (events.jsonl's
``traceback``, else the log lines above the exception line). An error re-raised from a DataLoader worker
("Caught RuntimeError in DataLoader worker process 0." then the worker's "Original Traceback (most recent call
last):") was raised in the worker: its place is in that traceback, not in the main process's ``for x in
loader``. A catalogue fix names the place: a CPU allocation of a wrong size is "at train.py:89:  batch =
torch.zeros(...)", not "somewhere in rank 1's traceback".
"""

from __future__ import annotations

import json
import re

from ..frames import is_tool_frame
from .model import LogEvent
from .startup import FRAME, LIBRARY_PARTS, shown_path, traceback_of

_PREFIX = re.compile(r"^\s*\[(?:rank|default)\d+\]:")  # torch's and torchrun's rank prefixes
# the header of the traceback a DataLoader worker's ExceptionWrapper carries (traceback structure, not wording)
_WORKER_TB = "Original Traceback (most recent call last)"
_AFTER_LINES = 80


def _own_frame(traceback: str) -> tuple[str, int, str] | None:
    lines = traceback.splitlines()
    frames = []
    for i, ln in enumerate(lines):
        m = FRAME.search(ln)
        if m:
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            src = _PREFIX.sub("", nxt).strip() if not FRAME.search(nxt) else ""
            frames.append((m.group("file"), int(m.group("line")), src))
    own = [
        f for f in frames if not any(p in f[0].replace("\\", "/") for p in LIBRARY_PARTS) and not is_tool_frame(f[0])
    ]
    return own[-1] if own else None


def _worker_part(text: str) -> str | None:
    """The worker's own traceback, when the text holds one, up to the error line that ends it."""
    at = text.find(_WORKER_TB)
    if at < 0:
        return None
    out = []
    for ln in text[at:].splitlines()[1:]:
        body = _PREFIX.sub("", ln)
        if out and body.strip() and not body.startswith(" "):
            break  # the worker's error line: its traceback ends here
        out.append(body)
    return "\n".join(out)


def _worker_traceback(ev: LogEvent, raw: dict, by_file: dict) -> str | None:
    text = raw.get((ev.file, ev.line_no)) or ""
    if text.lstrip().startswith("{"):
        try:
            rec = json.loads(text)
        except ValueError:
            return None
        return _worker_part(str(rec.get("message") or "")) or _worker_part(str(rec.get("traceback") or ""))
    after = [t for no, t in by_file.get(ev.file, []) if ev.line_no < no <= ev.line_no + _AFTER_LINES]
    first = next((i for i, t in enumerate(after) if t.strip()), None)
    if first is None or _WORKER_TB not in after[first]:
        return None
    return _worker_part("\n".join(after[first:]))


def apply_exception_place(facts: dict, events: list[LogEvent], lines: list) -> None:
    """Adds the two facts when the root cause is an exception whose traceback names a frame of the user's code."""
    if facts.get("failure.root_cause.kind") != "exception":
        return
    file, no = facts.get("failure.root_cause.file"), facts.get("failure.root_cause.line_no")
    ev = next((e for e in events if e.kind == "exception" and e.file == file and e.line_no == no), None)
    if ev is None:
        return
    raw = {(ln[0], ln[1]): ln[2] for ln in lines if ln[0] == ev.file}
    by_file = {ev.file: sorted((ln[1], ln[2]) for ln in lines if ln[0] == ev.file)}
    worker = _worker_traceback(ev, raw, by_file)
    frame = _own_frame(worker) if worker else _own_frame(traceback_of(ev, raw, by_file))
    if frame is None:
        return
    facts["failure.exception.where"] = f"{shown_path(frame[0])}:{frame[1]}"
    if frame[2]:
        facts["failure.exception.code"] = frame[2]
