"""The training loop's own collective calls, from the stack sampler: time every rank spends inside a
``torch.distributed`` call its script makes (metrics gathered with ``all_gather_object``, a loss
all-reduced for logging, a barrier per step), named by the call site.

The sampler attributes a sample to the innermost library call the script made and the script's line
that made it (the ``signatures`` of settings.json's evidence.stacks, ``sync`` for calls that wait on
other ranks or the device). Time inside such a call is the call's whole cost as the step sees it:
pickling, the transfer, and waiting for the slowest rank. DDP's own communication runs inside the
model's forward and ``backward()`` and is not counted here. The cost every rank pays is the least of
the ranks' (what one rank pays beyond it is its own extra work); the call site is the one with the
most time summed over the ranks.
"""

from __future__ import annotations

import re
from statistics import median

from .values import as_number, put_fact, safe_where

LIB_PREFIX = "torch.distributed."
OBJECT_CALLS = ("all_gather_object", "gather_object", "broadcast_object_list", "scatter_object_list")
# a function whose name says it clips gradients or computes their norm (clip_grad_norm_, clip_global_grad_norm,
# grad_norm, compute_gradnorm, ClipGradients.apply): a collective there sums per-parameter norms over ranks,
# which DDP's averaged gradients make unnecessary
GRAD_NORM_FUNC = re.compile(r"clip|grad_?norm|norm_?grad", re.IGNORECASE)


def _funcs(sampled: dict[int, dict]) -> dict[str, str]:
    """The script function each call site is in (the signature's ``func``), by ``where``."""
    out: dict[str, str] = {}
    for st in sampled.values():
        for s in st.get("signatures") or []:
            if isinstance(s, dict) and isinstance(s.get("where"), str) and isinstance(s.get("func"), str):
                out.setdefault(s["where"], s["func"])
    return out


def _per_site(st: dict) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for s in st.get("signatures") or []:
        if not isinstance(s, dict) or not s.get("sync"):
            continue
        lib, where, ms = s.get("lib"), s.get("where"), as_number(s.get("ms_per_step"))
        if not isinstance(lib, str) or not lib.startswith(LIB_PREFIX) or not isinstance(where, str) or ms is None:
            continue
        out[(lib, where)] = out.get((lib, where), 0.0) + ms
    return out


def loop_collective_facts(sampled: dict[int, dict]) -> dict:
    """python.loop_collective.*: the script's own collective call that costs every rank the most."""
    facts: dict = {}
    sites = {r: _per_site(st) for r, st in sorted(sampled.items())}
    if len(sites) < 2 or not any(sites.values()):
        return facts
    calls = {lib for s in sites.values() for lib, _ in s}
    totals = {lib: sum(ms for s in sites.values() for (lb, _), ms in s.items() if lb == lib) for lib in calls}
    lib = max(sorted(totals), key=lambda x: totals[x])
    per_rank = {r: round(sum(ms for (lb, _), ms in s.items() if lb == lib), 3) for r, s in sites.items()}
    every = min(per_rank.values())
    if every <= 0:
        return facts
    places: dict[str, float] = {}
    for s in sites.values():
        for (lb, where), ms in s.items():
            if lb == lib:
                places[where] = places.get(where, 0.0) + ms
    step_ms = median(as_number(st.get("step_ms")) or 0.0 for st in sampled.values())
    facts["python.loop_collective.call"] = lib[len(LIB_PREFIX) :]
    facts["python.loop_collective.object_call"] = lib.rsplit(".", 1)[-1] in OBJECT_CALLS
    where = max(sorted(places), key=lambda w: places[w])
    put_fact(facts, "python.loop_collective.where", safe_where(where))
    func = _funcs(sampled).get(where)
    if func is not None:
        facts["python.loop_collective.in_grad_norm"] = bool(GRAD_NORM_FUNC.search(func))
    put_fact(facts, "python.loop_collective.ms_per_step", round(every, 3), per_rank)
    if step_ms > 0:
        facts["python.loop_collective.share"] = round(every / step_ms, 4)
    return facts
