"""Which collective each rank was in when a collective failed on a size mismatch, from the bundle's evidence:
the ranks' Python tracebacks (the call site: DDP's gradient all-reduce in ``backward``, or the script's own
``dist.all_reduce`` at file:line) and, for a rank that died without a traceback (gloo's ``EnforceNotMet``
aborts the process), the sizes in gloo's message against DDP's gradient buckets recorded by ``ddpdoctor run``.

gloo's ``op.preamble.length <= op.nbytes. <got> vs <want>`` is raised on the rank that expected ``want`` bytes
and received ``got`` from a peer.  When that rank's own buffer is far smaller than any piece of DDP's gradient
buckets while a peer is in DDP's gradient all-reduce, the two ranks were in different collectives: one rank
called a collective of its own that the others never reach (``if rank == 0: dist.all_reduce(loss)``).  That is
a collective mismatch by call site (``op_mismatch``), not tensors of different sizes in one collective
(the padding fix): a size mismatch where every rank is at the same call site keeps the padding fix.
"""

from __future__ import annotations

import os
import re

from .catalogue import message_patterns
from .fatal_stack import crash_places
from .startup import FRAME

_SIZE = [re.compile(p) for p in message_patterns("gloo.size_mismatch")]
_COLLECTIVES = {
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "monitored_barrier",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "send",
    "recv",
}
DDP_ALLREDUCE = "the DDP gradient all-reduce (in backward)"


def _is_torch(path: str) -> bool:
    p = path.replace(os.sep, "/")
    return "/torch/" in p or p.startswith("<")


def last_tracebacks(lines: list, events: list = ()) -> dict[int, list[tuple[str, int, str]]]:
    """rank -> the frames (file, line, function), outermost first, of the last traceback that rank logged
    (in its log, else in the exception ``ddpdoctor run`` recorded in its events); for a rank that died of a
    signal, the stack faulthandler printed (logs/fatal_stack.py)."""
    out: dict[int, list] = {}
    for e in events:
        tb = e.data.get("traceback") if e.kind == "exception" and isinstance(e.data, dict) else None
        if e.rank is not None and isinstance(tb, str):
            frames = [(m["file"], int(m["line"]), m["func"]) for m in FRAME.finditer(tb) if m["func"]]
            if frames:
                out[e.rank] = frames
    run: dict[int, list] = {}
    dumping: set[int] = set()  # ranks inside a faulthandler dump: every thread, innermost first (read below)
    for ln in lines:
        rank, text = ln[3], ln[2]
        if rank is None or not isinstance(text, str):
            continue
        if text.startswith(("Traceback", "Fatal Python error")):
            run.pop(rank, None)
            if text.startswith("Fatal Python error"):
                dumping.add(rank)
            else:
                dumping.discard(rank)
            continue
        m = FRAME.search(text)
        if m and m["func"] and rank not in dumping:
            cur = run.setdefault(rank, [])
            cur.append((m["file"], int(m["line"]), m["func"]))
            out[rank] = cur
    for rank, place in crash_places(lines).items():  # the stack a rank died with (faulthandler): its last
        out[rank] = list(reversed(place["frames"]))
    return out


def site_of(frames: list[tuple[str, int, str]]) -> dict | None:
    """The collective a traceback was in and the script's line that called it, or None (not in one)."""
    op = None
    for path, _line, func in frames:
        p = path.replace(os.sep, "/")
        if "/torch/distributed/" in p and func in _COLLECTIVES:
            op = f"`{func}`"
        elif op is None and "/torch/autograd/" in p and func in ("backward", "_engine_run_backward"):
            op = DDP_ALLREDUCE
    if op is None:
        return None
    user = [f for f in frames if not _is_torch(f[0])]
    where = f"{os.path.basename(user[-1][0])}:{user[-1][1]}" if user else None
    return {"op": op, "where": where}


def size_mismatch_sites(facts: dict, known: dict, lines: list, events: list = ()) -> dict | None:
    """``failure.bundle.*`` naming an op mismatch by call site, or None when the evidence does not show one."""
    if facts.get("failure.message.id") != "gloo.size_mismatch" or facts.get("failure.root_cause.kind") not in (
        "exception",
        "message",
        "remote_error",
        "exit",
    ):
        return None
    text = str(facts.get("failure.message.text") or "")
    m = next((m for p in _SIZE if (m := p.search(text))), None)
    rank = facts.get("failure.message.rank")
    if m is None or not isinstance(rank, int):
        return None
    got, want = int(m["got"]), int(m["want"])
    sites = {r: s for r, fr in last_tracebacks(lines, events).items() if (s := site_of(fr))}
    buckets = [b for b in known.get("config.ddp.bucket_sizes_bytes") or [] if isinstance(b, int) and b > 0]
    world = facts.get("logs.world_size") or len(sites) or 2
    if rank not in sites and buckets and want * 4 * world < min(buckets) <= got * 4 * world:
        sites[rank] = {
            "op": f"a collective of {want} bytes of its own, not DDP's gradient all-reduce (its buckets are "
            + " and ".join(f"{b} bytes" for b in sorted(buckets, reverse=True))
            + ")",
            "where": None,
        }
    if len(sites) < 2 or len({s["op"] for s in sites.values()}) < 2:
        return None
    by_rank = [
        f"rank {r}: in {s['op']}" + (f" at {s['where']}" if s.get("where") else "") for r, s in sorted(sites.items())
    ]
    steps = facts.get("failure.bundle.steps_completed") or {}
    if steps and len(set(steps.values())) == 1:
        by_rank.append(f"every rank had completed {next(iter(steps.values()))} steps")
    own = [r for r, s in sites.items() if s["op"] != DDP_ALLREDUCE]
    return {
        "failure.bundle.cause": "op_mismatch",
        "failure.bundle.rank": own[0] if len(own) == 1 else rank,
        "failure.bundle.odd_rank": own[0] if len(own) == 1 and len(sites) > 2 else None,
        "failure.bundle.own_collective_rank": own[0] if len(own) == 1 else None,
        "failure.bundle.by_rank": by_rank,
        "failure.bundle.sizes": f"{got} vs {want} bytes",
    }


def apply_callsite_root(facts: dict, known: dict, lines: list, events: list = ()) -> None:
    """A gloo size mismatch between ranks in different collectives is an op mismatch by call site."""
    found = size_mismatch_sites(facts, known, lines, events)
    if found is None:
        return
    facts.update(found)
    facts["failure.root_cause.kind"] = "op_mismatch"
    facts["failure.root_cause.rank"] = found["failure.bundle.rank"]
    facts["failure.root_cause.text"] = "; ".join(found["failure.bundle.by_rank"])
    facts["failure.present"] = True
