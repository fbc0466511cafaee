"""Where a rank was when it died of a fatal signal, from the Python stacks ``faulthandler`` prints before the
process dies (``ddpdoctor run`` enables it in every rank, as ``PYTHONFAULTHANDLER=1`` does)::

    Fatal Python error: Segmentation fault

    Thread 0x00007fd1f63536c0 (most recent call first):
      File ".../threading.py", line 331 in wait
      ...
    Current thread 0x00007fd22c5beb80 (most recent call first):
      File ".../ctypes/__init__.py", line 519 in string_at
      File "train.py", line 18 in decode_record
      File "train.py", line 33 in main

The thread that crashed is the "Current thread"; when the signal came from a thread with no Python frame (gloo's
or NCCL's own threads calling ``std::terminate``), the main thread (the one whose outermost frame is
``<module>``) says where the training was.  The place named is the innermost frame of the script's own code
(not a library), with the library call it was in."""

from __future__ import annotations

import os
import re

from ..frames import is_tool_frame
from .startup import FRAME, LIBRARY_PARTS

_FATAL = re.compile(r"Fatal Python error: (?P<what>[^\n]+)")
_THREAD = re.compile(r"^(?P<current>Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):")


def _own(path: str) -> bool:
    p = path.replace(os.sep, "/")
    return not any(part in p for part in LIBRARY_PARTS) and not is_tool_frame(p)


def _dumps(lines: list) -> dict[int, dict]:
    """rank -> {"what": the fatal error, "threads": [(current, frames innermost first)]}: each rank's last dump."""
    out: dict[int, dict] = {}
    cur: dict[int, dict] = {}
    for ln in lines:
        rank, text = ln[3], ln[2]
        if rank is None or not isinstance(text, str):
            continue
        text = text.strip()
        m = _FATAL.match(text)
        if m:
            cur[rank] = out[rank] = {"what": m["what"].strip(), "threads": []}
            continue
        d = cur.get(rank)
        if d is None:
            continue
        t = _THREAD.match(text)
        if t:
            d["threads"].append((t["current"] == "Current thread", []))
            continue
        f = FRAME.search(text)
        if f and d["threads"]:
            d["threads"][-1][1].append((f["file"], int(f["line"]), f["func"] or "?"))
        elif text.startswith("Extension modules") or (text and not f and d["threads"] and d["threads"][-1][1]):
            cur.pop(rank)  # the dump ended
    return out


def _place(frames: list[tuple[str, int, str]]) -> tuple[str, str | None] | None:
    """(``decode_record (train.py:18)``, ``ctypes.string_at``): the innermost frame of the script's own code and
    the innermost library frame under it, which made the native call (None when that was the script's own
    frame)."""
    own = [i for i, f in enumerate(frames) if _own(f[0])]
    if not own:
        return None
    i = own[0]
    path, line, func = frames[i]
    call = None
    if i > 0:
        lib_path, _l, lib_func = frames[0]
        call = f"{_module(lib_path)}.{lib_func}"
    return f"{func} ({os.path.basename(path)}:{line})", call


def _module(path: str) -> str:
    """A library file as its module: ``…/lib/python3.11/ctypes/__init__.py`` → ``ctypes``."""
    p = path.replace(os.sep, "/")
    for mark in ("/site-packages/", "/dist-packages/"):
        if mark in p:
            p = p.split(mark, 1)[1]
            break
    else:
        m = re.search(r"/lib/python\d+(?:\.\d+)?/(.+)$", p)
        p = m.group(1) if m else os.path.basename(p)
    p = re.sub(r"\.py$", "", p).removesuffix("/__init__")
    return p.replace("/", ".")


def crash_places(lines: list) -> dict[int, dict]:
    """rank -> {"where", "call", "thread": "crashed" | "main", "what", "frames" (innermost first)} for each rank
    whose log holds a faulthandler dump that names a frame of the script's own code."""
    out = {}
    for rank, d in _dumps(lines).items():
        threads = d["threads"]
        current = next((fr for is_cur, fr in threads if is_cur), [])
        place, thread = _place(current), "crashed"
        if place is None:  # a native thread crashed: where the training (the main thread) was
            main = next((fr for _c, fr in threads if fr and fr[-1][2] == "<module>"), [])
            place, thread = _place(main), "main"
        if place is not None:
            frames = current if thread == "crashed" else main
            out[rank] = {"where": place[0], "call": place[1], "thread": thread, "what": d["what"], "frames": frames}
    return out


def apply_crash_place(facts: dict, lines: list) -> None:
    """``failure.crash.where`` / ``.call`` / ``.where_thread`` for the rank the root cause names, when it died
    of a signal and its log holds faulthandler's stacks."""
    for k in ("where", "call", "where_thread"):
        facts[f"failure.crash.{k}"] = None
    rank = facts.get("failure.root_cause.rank")
    if facts.get("failure.root_cause.kind") not in ("killed", "crash", "teardown") or rank is None:
        return
    place = crash_places(lines).get(rank)
    if place is not None:
        facts["failure.crash.where"] = place["where"]
        facts["failure.crash.call"] = place["call"]
        facts["failure.crash.where_thread"] = place["thread"]
