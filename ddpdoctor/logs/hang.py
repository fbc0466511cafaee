"""``failure.hang.*``: what each rank was doing when one of them waited too long in a collective, from
the stack dumps ``ddpdoctor run`` writes (``ranks/rank<N>/hang_dump.jsonl``, see capture/agent/hang.py) and the
ranks' exits.

Per rank: in a collective (which, for how long), busy elsewhere (file:line, function, for how long),
exited (code / signal) or gone (no dump and no exit).  The busy rank is the cause when another rank
waited in a collective meanwhile: work done on one rank must finish within the timeout, or run on every
rank.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..frames import is_tool_frame
from .blocked import blocked_in, user_frame
from .model import LogEvent

MAX_HANG_FILE = 8 * 1024 * 1024
_RANK_DIR = re.compile(r"^rank(\d+)$")


def hang_dumps(paths: list[str]) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for p in paths:
        root = Path(p)
        if not root.is_dir():
            continue
        for f in sorted(root.glob("ranks/rank*/hang_dump.jsonl")) + sorted(root.glob("*/ranks/rank*/hang_dump.jsonl")):
            m = _RANK_DIR.match(f.parent.name)
            try:
                if f.stat().st_size > MAX_HANG_FILE:
                    continue
                d = json.loads(f.read_text(encoding="utf-8", errors="replace"))
            except (OSError, ValueError, RecursionError):
                continue
            if (
                not isinstance(d, dict)
                or d.get("schema") != "ddpdoctor.hang/1"
                or not isinstance(d.get("states"), list)
            ):
                continue
            if d.get("resolved"):  # the wait ended with progress: no hang
                continue
            rank = d.get("rank") if isinstance(d.get("rank"), int) else (int(m.group(1)) if m else None)
            if rank is not None:
                out[rank] = d
    return out


def _where(w: dict | None) -> str | None:
    if not isinstance(w, dict) or not w.get("function"):
        return None
    return f"{os.path.basename(str(w.get('file')))}:{w.get('line')}"


def _users_place(state: dict) -> dict | None:
    """The state's ``where``, or, when the agent named one of ddpdoctor's own frames (its patch around the
    DataLoader's ``__next__``), the innermost frame of the user's code on the recorded stack."""
    w = state.get("where")
    if not isinstance(w, dict) or not is_tool_frame(w.get("file")):
        return w
    stack = [f for f in state.get("stack") or [] if isinstance(f, dict)]
    return user_frame(stack)


def _longest(states: list[dict], kind: str) -> dict | None:
    best = None
    for s in states:
        if s.get("state") != kind:
            continue
        dur = float(s.get("last_seen") or 0) - float(s.get("since") or s.get("first_seen") or 0)
        if best is None or dur > best[0]:
            best = (dur, s)
    return best[1] | {"seconds": round(best[0], 1)} if best else None


def hang_facts(dumps: dict[int, dict], events: list[LogEvent], world_size: int | None) -> dict:
    exits: dict[int, LogEvent] = {}
    for e in events:
        if e.kind == "exit" and e.rank is not None:
            exits.setdefault(e.rank, e)
    ranks = sorted(set(dumps) | (set(range(world_size)) if world_size else set()))
    per_rank: dict[str, dict] = {}
    busy, blocked, waiting = [], [], []
    for r in ranks:
        d = dumps.get(r)
        st: dict = {"rank": r}
        if d is not None:
            states = d["states"]
            coll, work = _longest(states, "collective"), _longest(states, "busy")
            if work is not None and (coll is None or work["seconds"] >= coll["seconds"] or coll["seconds"] < 1):
                place = _users_place(work)
                st.update(
                    state="busy",
                    where=_where(place),
                    seconds=work["seconds"],
                    function=(place or {}).get("function"),
                )
                wait = blocked_in(work)
                if wait is None:
                    busy.append((work["seconds"], r, st))
                else:  # outside any collective, but waiting on something of its own: not busy
                    st.update(state="blocked", where=wait["where"], function=wait["function"])
                    st.update({f"wait_{k}": v for k, v in wait.items() if k not in ("where", "function")})
                    blocked.append((work["seconds"], r, st))
            elif coll is not None:
                st.update(
                    state="collective", op=coll.get("op"), seconds=coll["seconds"], where=_where(_users_place(coll))
                )
                waiting.append(r)
        e = exits.get(r)
        if e is not None:
            st["exit_code"], st["signal"] = e.data.get("exitcode"), e.data.get("signal")
            st.setdefault("state", "exited")
        st.setdefault("state", "gone")
        per_rank[str(r)] = st
    busy.sort(reverse=True)
    b = busy[0][2] if busy and waiting else None
    w = per_rank[str(waiting[0])] if waiting else None
    blocked.sort(reverse=True)
    k = blocked[0][2] if blocked and waiting and not busy else None
    return {
        "failure.hang.present": bool(dumps),
        "failure.hang.ranks": per_rank,
        "failure.hang.per_rank": [_sentence(s) for s in per_rank.values()],
        "failure.hang.busy_rank": b["rank"] if b else None,
        "failure.hang.busy_where": b.get("where") if b else None,
        "failure.hang.busy_function": b.get("function") if b else None,
        "failure.hang.busy_seconds": b.get("seconds") if b else None,
        "failure.hang.blocked_rank": k["rank"] if k else None,
        "failure.hang.blocked_where": k.get("where") if k else None,
        "failure.hang.blocked_function": k.get("function") if k else None,
        "failure.hang.blocked_code": k.get("wait_code") if k else None,
        "failure.hang.blocked_kind": k.get("wait_kind") if k else None,
        "failure.hang.blocked_holder": k.get("wait_holder") if k else None,
        "failure.hang.blocked_seconds": k.get("seconds") if k else None,
        "failure.hang.waiting_ranks": waiting,
        "failure.hang.waiting_op": w.get("op") if w else None,
        "failure.hang.waiting_seconds": w.get("seconds") if w else None,
    }


def _sentence(s: dict) -> str:
    r = s["rank"]
    if s["state"] == "busy":
        text = (
            f"rank {r} was busy in {s['function']}() at {s['where']} for {s.get('seconds')} s"
            if s.get("where")
            else f"rank {r} was busy in its own code for {s.get('seconds')} s"
        )
    elif s["state"] == "blocked":
        code = f" (`{s['wait_code']}`)" if s.get("wait_code") else ""
        text = (
            f"rank {r} waited for its DataLoader in {s['function']}() at {s['where']}{code} for {s.get('seconds')} s"
            if s.get("wait_kind") == "dataloader"
            else f"rank {r} was blocked, not computing, in {s['function']}() at {s['where']}{code} for {s.get('seconds')} s"
        )
    elif s["state"] == "collective":
        text = f"rank {r} waited in {s.get('op')} for {s.get('seconds')} s"
    elif s["state"] == "exited":
        text = f"rank {r} had exited"
    else:
        return f"rank {r} is gone (no stack dump and no exit recorded)"
    if s.get("exit_code") is not None or s.get("signal"):
        text += f", then ended by {s['signal']}" if s.get("signal") else f", then exited with code {s['exit_code']}"
    return text


# root causes a busy rank explains: the others only waited for it (or lost it once the timeout fired)
BUSY_EXPLAINS = ("stopped", "timeout", "seq_behind", "remote_error", "exit", "flight_recorder")


def apply_busy_root(facts: dict) -> None:
    """A rank busy outside any collective while another waited in one is the root cause (kind ``busy``)."""
    rank = facts.get("failure.hang.busy_rank")
    if rank is None or facts.get("failure.root_cause.kind") not in BUSY_EXPLAINS:
        return
    facts["failure.root_cause.kind"] = "busy"
    facts["failure.root_cause.rank"] = rank
    facts["failure.root_cause.text"] = facts["failure.hang.busy_where"]
    facts["failure.present"] = True
    failing = set(facts.get("failure.ranks") or []) | set(facts.get("failure.hang.waiting_ranks") or [])
    facts["failure.ranks"] = sorted(failing | {rank})
    facts["failure.symptom_ranks"] = sorted(failing - {rank})
    named = facts.get("failure.torchrun_named_rank")
    facts["failure.torchrun_misleading"] = bool(named is not None and named != rank)


def apply_blocked_root(facts: dict) -> None:
    """A rank blocked outside any collective (a lock, a queue, a sleep of its own) while another waited in
    one stopped issuing collectives (kind ``stopped``): it did no work the others waited for."""
    rank = facts.get("failure.hang.blocked_rank")
    if rank is None or facts.get("failure.root_cause.kind") not in BUSY_EXPLAINS:
        return
    facts["failure.root_cause.kind"] = "stopped"
    facts["failure.root_cause.rank"] = rank
    facts["failure.root_cause.text"] = facts["failure.hang.blocked_where"]
    facts["failure.present"] = True
    waiting = sorted(set(facts.get("failure.hang.waiting_ranks") or []) - {rank})
    if facts.get("failure.stopped.rank") != rank:
        facts["failure.stopped.last_step"] = None
    facts["failure.stopped.rank"], facts["failure.stopped.ranks"] = rank, [rank]
    facts["failure.stopped.waiting_ranks"] = waiting
    failing = set(facts.get("failure.ranks") or []) | set(waiting)
    facts["failure.ranks"] = sorted(failing | {rank})
    facts["failure.symptom_ranks"] = sorted(failing - {rank})
    named = facts.get("failure.torchrun_named_rank")
    facts["failure.torchrun_misleading"] = bool(named is not None and named != rank)
