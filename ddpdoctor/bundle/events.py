"""Reading ``ranks/rank<R>/events.jsonl`` of one or several bundles (pure Python)."""

from __future__ import annotations

import json
from pathlib import Path

from .. import safe_io
from ..errors import InputError

PROBLEM_KINDS = ("oom", "exception", "signal", "stuck_after_peer_stop", "forced_exit", "user_profiler")


def load_events(paths: list[str]) -> list[dict]:
    """Every event of every rank under the paths, oldest first (lines cut short by a killed
    process are skipped)."""
    events = []
    for raw in paths:
        root = Path(raw)
        files = [root] if root.is_file() else sorted(root.rglob("events.jsonl"))
        for p in files:
            try:
                lines = safe_io.read_log_text(p).splitlines()
            except (OSError, InputError):
                continue
            for line in lines:
                try:
                    e = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if isinstance(e, dict) and "time" in e:
                    events.append(e)
    events.sort(key=lambda e: (e.get("time", 0), e.get("rank", 0)))
    return events


def problem_events(events: list[dict]) -> list[dict]:
    """The problems the ranks saw, oldest first, one per problem: an OOM that ended its rank
    appears once (``caught`` False), an OOM the script caught has ``caught`` True."""
    problems = [e for e in events if e.get("kind") in PROBLEM_KINDS]
    uncaught_oom_ranks = {e.get("rank") for e in problems if e.get("kind") == "exception" and e.get("oom")}
    out, oom_shown = [], set()
    for e in problems:
        r = e.get("rank")
        if e.get("kind") == "oom":
            if e.get("caught") is None:
                e = dict(e, caught=r not in uncaught_oom_ranks)
            oom_shown.add(r)
        elif e.get("kind") == "exception" and e.get("oom") and r in oom_shown:
            continue
        out.append(e)
    return out
