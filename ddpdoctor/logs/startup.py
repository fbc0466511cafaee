"""``failure.startup.*``: the training script never started -- python could not open it, could not
compile it, or an import failed before the first training step.

torchrun then reports only "exited with code 1/2", and a generic rule would tell the user to search
the script for ``sys.exit(`` or to "fix the ModuleNotFoundError on rank N".  The interpreter already
said what is wrong; this names it in the interpreter's own words and at the user's ``file:line``:

    python: can't open file '/home/me/slow_rnak.py': [Errno 2] No such file or directory
    File "/home/me/train.py", line 3  /  SyntaxError: invalid syntax
    File "/home/me/train.py", line 3, in <module>  /  ModuleNotFoundError: No module named 'torchvisionx'

Reads the events and the lines ``analyze_logs`` already parsed (no file is read again).  When found,
``failure.root_cause.kind`` becomes ``startup`` (the script-cannot-start rule reads it) and the rank is None when every rank
failed alike.
"""

from __future__ import annotations

import difflib
import json
import os
import re

from .model import LogEvent
from .patterns import CANT_OPEN

# a traceback frame; the function when the line names one (``, in main``)
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)(?:,? in (?P<func>[\w<>.]+))?')
COMPILE_ERRORS = ("SyntaxError", "IndentationError", "TabError")
IMPORT_ERRORS = ("ModuleNotFoundError", "ImportError")
LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python", "<frozen ", "<string>")


def _user_frame(traceback: str) -> tuple[str, int, str] | None:
    """(file, line, source) of the innermost frame in the user's code (not the standard library, not
    an installed package); for a SyntaxError the one frame python prints, whatever its path."""
    frames = []
    lines = traceback.splitlines()
    for i, ln in enumerate(lines):
        m = FRAME.search(ln)
        if m:
            src = lines[i + 1].strip() if i + 1 < len(lines) and not FRAME.search(lines[i + 1]) else ""
            frames.append((m.group("file"), int(m.group("line")), src))
    own = [f for f in frames if not any(p in f[0].replace(os.sep, "/") for p in LIBRARY_PARTS)]
    return (own or frames or [None])[-1]


def traceback_of(ev: LogEvent, raw: dict[tuple[str, int], str], by_file: dict[str, list]) -> str:
    """The traceback text of an exception event: the events.jsonl record's ``traceback``, else the
    log lines before the exception line (back to ``Traceback (most recent call last):``)."""
    text = raw.get((ev.file, ev.line_no))
    if text and text.lstrip().startswith("{"):
        try:
            return str(json.loads(text).get("traceback") or "")
        except ValueError:
            return ""
    before = [t for no, t in by_file.get(ev.file, []) if ev.line_no - 40 <= no <= ev.line_no]
    for i in range(len(before) - 1, -1, -1):
        if "Traceback (most recent call last)" in before[i]:
            return "\n".join(before[i:])
    return "\n".join(before[-6:])


def _close_name(path: str) -> str | None:
    """A file beside the missing one with a similar name (slow_rnak.py -> slow_rank.py), when the
    folder is on this machine."""
    folder, name = os.path.split(path)
    try:
        names = [n for n in os.listdir(folder or ".") if n.endswith(os.path.splitext(name)[1] or ".py")]
    except OSError:
        return None
    best = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return os.path.join(folder, best[0]) if best else None


def shown_path(path: str) -> str:
    """The user's path as they would type it here: relative to the current folder when under it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _ranks(evs) -> list[int]:
    return sorted({e[0] for e in evs if e[0] is not None})


def startup_facts(events: list[LogEvent], lines: list, world_size: int | None) -> dict:
    """The facts, or {} when every rank got past its start (or the logs say nothing of it).
    ``lines``: ``[file, line_no, text, rank, time, …]`` as analyze_logs collects them."""
    raw = {(ln[0], ln[1]): ln[2] for ln in lines}
    missing = []
    for ln in lines:
        m = CANT_OPEN.search(ln[2]) if "can't open file" in ln[2] else None
        if m:
            missing.append((ln[3], ln[4], m))
    if missing:
        rank, _t, m = min(missing, key=lambda x: (x[1] is None, x[1] or 0))
        path = m.group("path")
        close = _close_name(path)
        return _facts(
            "missing_script",
            _ranks(missing),
            world_size,
            rank,
            message=f"{os.path.basename(m.group('interp'))}: can't open file '{shown_path(path)}': "
            f"[Errno {m.group('errno')}] {m.group('reason').strip()}",
            exc_type=None,
            file=shown_path(path),
            line=None,
            code=None,
            suggestion=shown_path(close) if close else None,
        )
    stepped = {e.rank for e in events if e.kind == "progress" and (e.data.get("step") or 0) >= 0}
    by_file: dict[str, list] = {}
    for ln in lines:
        by_file.setdefault(ln[0], []).append((ln[1], ln[2]))
    found = []
    for e in events:
        etype = str(e.data.get("exc_type") or "").rsplit(".", 1)[-1]
        if e.kind != "exception" or etype not in COMPILE_ERRORS + IMPORT_ERRORS or e.rank in stepped:
            continue
        if e.data.get("step") not in (None, 0):
            continue
        found.append((e.rank, e.time, e, etype))
    if not found:
        return {}
    rank, _t, ev, etype = min(found, key=lambda x: (x[1] is None, x[1] or 0))
    frame = _user_frame(traceback_of(ev, raw, by_file))
    message = str(ev.data.get("message") or ev.text.partition(": ")[2])
    if etype in COMPILE_ERRORS:
        message = re.sub(r" \([^()]+, line \d+\)$", "", message)  # the place is named on its own
    kind = "syntax" if etype in COMPILE_ERRORS else "import"
    return _facts(
        kind,
        _ranks(found),
        world_size,
        rank,
        message=f"{etype}: {message}",
        exc_type=etype,
        file=shown_path(frame[0]) if frame else None,
        line=frame[1] if frame else None,
        code=(frame[2] or None) if frame else None,
        suggestion=None,
    )


def _facts(kind, ranks, world_size, first_rank, **f) -> dict:
    everyone = set(range(world_size)) if world_size else set(ranks)
    shared = len(ranks) > 1 and set(ranks) >= everyone
    where = f"{f['file']}:{f['line']}" if f.get("file") and f.get("line") else f.get("file")
    return {
        "failure.startup.present": True,
        "failure.startup.kind": kind,
        "failure.startup.message": f["message"],
        "failure.startup.exc_type": f["exc_type"],
        "failure.startup.where": where,
        "failure.startup.file": f["file"],
        "failure.startup.code": f["code"],
        "failure.startup.suggestion": f["suggestion"],
        "failure.startup.ranks": ranks,
        "failure.startup.shared": shared,
        "failure.present": True,
        "failure.root_cause.kind": "startup",
        "failure.root_cause.rank": None if shared else first_rank,
    }


def apply_startup(facts: dict, events: list[LogEvent], lines: list, world_size: int | None) -> None:
    """A script that could not start is the root cause, ahead of the exits and peer errors it led to."""
    found = startup_facts(events, lines, world_size)
    if found:
        for name in (
            "failure.startup.exc_type",
            "failure.startup.where",
            "failure.startup.file",
            "failure.startup.code",
            "failure.startup.suggestion",
        ):
            facts.pop(name, None)
            if found.get(name) is None:  # not recorded, rather than a None a template would print
                found.pop(name)
        facts.update(found)
    else:
        facts["failure.startup.present"] = False
