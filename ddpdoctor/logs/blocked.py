"""Busy or blocked: a rank that stayed outside every collective while another waited in one either did work
of its own (evaluation, checkpointing, a download: a busy rank) or waited on something only another thread of that
rank could end -- a lock, a condition or event, a queue -- which is a deadlock, not work (a rank that stopped issuing collectives).  The hang
dump (capture/agent/hang.py) holds the evidence: the stuck thread's stack and the ``where`` its later samples
moved to; the source line of the innermost frame is read from the dump (``code``) or from the script when
it exists where the analysis runs.

- the innermost frame is a wait of the standard library (``threading`` acquire/wait, ``queue`` get/put,
  ``multiprocessing`` locks and events): blocked;
- the innermost frame's source line is such a wait written in the script (``with self.lock:``,
  ``lock.acquire()``, ``ready.wait()``, ``q.get()`` without a timeout): blocked, if the later samples did
  not move to another line of that function;
- a sleep, a subprocess, a socket or a thread join stays busy: one rank's own work that takes time;
- the DataLoader's ``__next__`` with none of the user's code deeper (the workers make the batch): waiting for its
  DataLoader, named at the user's line that asked for the batch (``for x, y in loader:``), never at the capture
  agent's patch around ``__next__``;
- CPU time over the wait, when the dump has it (``cpu_s``), above half the wall time: busy, whatever the stack.

A lock taken by a ``with``/``acquire`` line whose function is already on the same stack further out is the
same thread re-acquiring a lock it holds (a non-reentrant ``threading.Lock`` deadlocks on itself): the outer
frame is named as the holder.
"""

from __future__ import annotations

import linecache
import os
import re

from ..frames import is_dataloader_next, is_tool_frame

# waits that only another thread of the same rank can end: a lock, a condition or event, a queue.  A sleep,
# a subprocess, a socket or a thread join is work of the rank's own that takes time (a download, a
# preprocessing job): that stays "busy", whatever CPU it used.
_STDLIB_WAITS = {
    "threading.py": {"acquire", "wait", "wait_for"},
    "queue.py": {"get", "put"},
    "synchronize.py": {"acquire", "wait", "__enter__"},  # multiprocessing locks, events, conditions
}
_LOCKISH = r"\w*(?:lock|mutex|sem|semaphore|cond|condition)\w*"
_CODE_WAITS = [
    ("lock", re.compile(rf"^\s*(?:async\s+)?with\s+(?:[\w.]+\.)?{_LOCKISH}\s*(?:,|:|\bas\b)", re.I)),
    ("lock", re.compile(rf"\b(?:[\w.]+\.)?{_LOCKISH}\.acquire\(", re.I)),
    ("lock", re.compile(r"\.acquire\(\s*\)")),
    ("wait", re.compile(r"\b\w*(?:event|cond|condition|ready|done|flag|signal)\w*\.wait(?:_for)?\(", re.I)),
    ("queue", re.compile(r"\b\w*(?:queue|q)\.get\((?!.*\btimeout\b)(?!.*\bblock\s*=\s*False)", re.I)),
]
BUSY_CPU = 0.50  # CPU time / wall time over this: the thread computed, whatever its stack shows


def _code(frame: dict) -> str | None:
    code = frame.get("code")
    if isinstance(code, str):
        return code
    path, line = frame.get("file"), frame.get("line")
    if isinstance(path, str) and isinstance(line, int) and os.path.isfile(path):
        return linecache.getline(path, line).strip() or None
    return None


def _where(frame: dict) -> str:
    return f"{os.path.basename(str(frame.get('file')))}:{frame.get('line')}"


def _cpu_share(state: dict) -> float | None:
    cpu = state.get("cpu_s")
    wall = float(state.get("last_seen") or 0) - float(state.get("first_seen") or 0)
    if not isinstance(cpu, (int, float)) or wall < 1.0:
        return None
    return float(cpu) / wall


def user_frame(stack: list[dict]) -> dict | None:
    """The innermost frame of the user's code: not ddpdoctor's (the agent's patches), not torch's, not the
    standard library's."""
    own = [
        f
        for f in stack
        if not is_tool_frame(f.get("file"))
        and "/torch/" not in str(f.get("file"))
        and not _is_stdlib(str(f.get("file")))
    ]
    return own[-1] if own else None


def loader_wait(stack: list[dict]) -> dict | None:
    """The rank waits in its DataLoader's ``__next__`` with none of the user's code deeper (their dataset's
    ``__getitem__`` would be the rank's own work): the frame of the user's ``next(loader)`` / ``for … in loader``."""
    idx = next((i for i, f in enumerate(stack) if is_dataloader_next(f.get("file"), f.get("function"))), None)
    if idx is None or user_frame(stack[idx + 1 :]) is not None:
        return None
    return user_frame(stack[:idx])


def blocked_in(state: dict) -> dict | None:
    """What a rank recorded as 'busy' waited on, or None when it worked (or the dump cannot tell):
    ``{"kind", "where", "function", "code", "holder", "cpu_share"}``; kind ``dataloader`` when it waited for
    its DataLoader (where: the user's line that asked it for a batch)."""
    stack = [f for f in state.get("stack") or [] if isinstance(f, dict)]
    share = _cpu_share(state)
    if (share is not None and share > BUSY_CPU) or not stack:
        return None
    at = loader_wait(stack)
    if at is not None:
        return {
            "kind": "dataloader",
            "where": _where(at),
            "function": at.get("function"),
            "code": _code(at),
            "holder": None,
            "cpu_share": round(share, 3) if share is not None else None,
        }
    kind, at = None, None
    inner = stack[-1]
    base = os.path.basename(str(inner.get("file")))
    if inner.get("function") in _STDLIB_WAITS.get(base, ()):
        kind = (
            "queue" if base == "queue.py" else ("lock" if inner.get("function") in ("acquire", "__enter__") else "wait")
        )
        at = user_frame(stack) or inner
    else:
        code = _code(inner) or ""
        kind = next((k for k, rx in _CODE_WAITS if rx.search(code)), None)
        at = inner
    if kind is None or not _still_there(state, at):
        return None
    holder = None
    if kind == "lock":
        idx = next((i for i, f in enumerate(stack) if f is at), 0)
        outer = [f for f in stack[:idx] if f.get("file") == at.get("file") and f.get("function") == at.get("function")]
        holder = _where(outer[-1]) if outer else None
    return {
        "kind": kind,
        "where": _where(at),
        "function": at.get("function"),
        "code": _code(at),
        "holder": holder,
        "cpu_share": round(share, 3) if share is not None else None,
    }


def _still_there(state: dict, at: dict) -> bool:
    """The stack is the state's first sample; its ``where`` follows the later ones: a rank that moved on
    to another line of that function since was not stuck at the first one."""
    w = state.get("where")
    if not isinstance(w, dict) or w.get("function") != at.get("function") or w.get("file") != at.get("file"):
        return True
    return w.get("line") == at.get("line")


def _is_stdlib(path: str) -> bool:
    p = path.replace(os.sep, "/")
    return "/lib/python3" in p and "/site-packages/" not in p or p.startswith("<frozen")
