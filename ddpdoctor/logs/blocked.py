"""Busy or blocked: a rank that stayed outside every collective while another waited in one either worked
(its CPU ran: evaluation, checkpointing) or waited on something of its own (a lock, a queue, a sleep, a socket).
The hang dump (capture/agent/hang.py) holds the evidence: the stuck thread's stack, the source line of its
frames when the agent read it, and the thread's CPU time over the wait when the platform gave it.

- CPU time recorded over ≥ 1 s: under 10 % of the wall time is blocked, over 50 % busy (in between: the
  stack decides);
- the innermost frame is a wait of the standard library (``threading`` acquire/wait/join, ``queue`` get,
  ``selectors``/``socket``/``subprocess`` waits, ``concurrent.futures`` result): blocked;
- the innermost frame's source line is a wait primitive written in the script (``with self.lock:``,
  ``lock.acquire()``, ``event.wait()``, ``time.sleep(…)``, ``thread.join()``, ``q.get()``): blocked.

A lock taken by a ``with``/``acquire`` line whose function is already on the same stack further out is the
same thread re-acquiring a lock it holds (a non-reentrant ``threading.Lock`` deadlocks on itself): the outer
frame is named as the holder.  Reads the dump only; the source file is read when the dump lacks the line and
the file exists where the analysis runs.
"""

from __future__ import annotations

import linecache
import os
import re

_STDLIB_WAITS = {
    "threading.py": {"acquire", "wait", "wait_for", "join", "_wait_for_tstate_lock"},
    "queue.py": {"get", "put", "join"},
    "selectors.py": {"select"},
    "socket.py": {"accept", "recv_into", "readinto"},
    "subprocess.py": {"wait", "communicate", "_wait", "_try_wait"},
    "_base.py": {"result", "wait"},  # concurrent.futures
    "connection.py": {"recv", "_recv", "_recv_bytes", "poll", "wait"},  # multiprocessing
    "synchronize.py": {"acquire", "wait", "__enter__"},
    "time.py": {"sleep"},
}
_LOCKISH = r"\w*(?:lock|mutex|sem|semaphore|cond|condition)\w*"
_CODE_WAITS = [
    ("lock", re.compile(rf"^\s*(?:async\s+)?with\s+(?:[\w.]+\.)?{_LOCKISH}\s*(?:,|:|\bas\b)", re.I)),
    ("lock", re.compile(rf"\b(?:[\w.]+\.)?{_LOCKISH}\.acquire\(", re.I)),
    ("lock", re.compile(r"\.acquire\(\s*\)")),
    ("wait", re.compile(r"\.wait(?:_for)?\(")),
    ("sleep", re.compile(r"\b(?:time\.)?sleep\(")),
    ("join", re.compile(r"\.join\(\s*(?:timeout\s*=\s*)?[\w.]*\s*\)\s*$")),
    ("queue", re.compile(r"\b\w*(?:queue|q)\.get\(", re.I)),
    ("socket", re.compile(r"\.(?:recv|recv_into|accept|select|poll)\(")),
]
IDLE_CPU = 0.10  # CPU time / wall time under this: the thread waited
BUSY_CPU = 0.50


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


def blocked_in(state: dict) -> dict | None:
    """What a rank recorded as 'busy' waited on, or None when it worked (or the dump cannot tell):
    ``{"kind", "where", "function", "code", "holder", "cpu_share"}``."""
    stack = [f for f in state.get("stack") or [] if isinstance(f, dict)]
    share = _cpu_share(state)
    if (share is not None and share > BUSY_CPU) or not stack:
        return None
    kind, at = None, None
    inner = stack[-1]
    base = os.path.basename(str(inner.get("file")))
    if inner.get("function") in _STDLIB_WAITS.get(base, ()):
        kind = "sleep" if base == "time.py" else ("queue" if base == "queue.py" else "wait")
        if base == "threading.py" and inner.get("function") == "acquire":
            kind = "lock"
        user = [f for f in stack if "/torch/" not in str(f.get("file")) and not _is_stdlib(str(f.get("file")))]
        at = user[-1] if user else inner
    else:
        code = _code(inner) or ""
        kind = next((k for k, rx in _CODE_WAITS if rx.search(code)), None)
        at = inner
    if kind is None and share is not None and share < IDLE_CPU:
        kind, at = "wait", inner
    if kind is None:
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


def _is_stdlib(path: str) -> bool:
    p = path.replace(os.sep, "/")
    return "/lib/python3" in p and "/site-packages/" not in p or p.startswith("<frozen")
