"""Facts from the time a Python stack sampler cannot see, as `ddpdoctor run` records it in each rank's
settings.json (``evidence.gc``: every garbage collection over the window; ``evidence.gil``: the
sampler's gaps, the part of each that the sampler thread spent runnable without a CPU set apart, the
rest put on GC or on the call that held the GIL, named by the C watchdog's stack dumps or by the call the
gap ended on (older captures: by the frames around the gap); capture/agent/gil.py).  Only the rest counts as GIL-held time (``python.gil_held.*``,
``python.sampler_starved_ms_per_step``); the CPU-starved part is ``python.sampler_cpu_starved_ms_per_step``.
Pure Python, no torch.

``gil_facts(ranks, params)``: ``ranks`` = {rank: settings dict}; ``params`` = the ``[evidence]`` table
of rules/metrics.toml.  Every fact is absent when no rank recorded what it needs.
"""

from __future__ import annotations

from statistics import median

from .values import as_number, evidence_of, put_fact, safe_where


def _step_ms(d: dict) -> float | None:
    st = evidence_of(d).get("stacks")
    return as_number(st.get("step_ms")) if isinstance(st, dict) else None


def _excess(per_rank: dict[int, float], step_ms: float, min_share: float, min_ratio: float):
    """(rank, excess ms, others' median ms) of the rank materially above the median of the others, or None."""
    best = None
    for r, ms in per_rank.items():
        others = median(v for o, v in per_rank.items() if o != r)
        excess = ms - others
        if excess >= min_share * step_ms and ms >= min_ratio * others and (best is None or excess > best[1]):
            best = (r, excess, others)
    return best


def gc_facts(ranks: dict[int, dict], params: dict) -> dict:
    facts: dict = {}
    recs = {
        r: g
        for r, d in sorted(ranks.items())
        if isinstance(g := evidence_of(d).get("gc"), dict) and as_number(g.get("ms_per_step")) is not None
    }
    if not recs:
        return facts
    ms = {r: round(float(g["ms_per_step"]), 3) for r, g in recs.items()}  # a number: as_number above
    put_fact(facts, "python.gc.ms_per_step", max(ms.values()), ms)
    steps = [s for s in (_step_ms(ranks[r]) for r in recs) if s]
    if len(recs) < 2 or not steps:
        return facts
    step_ms = median(steps)
    put_fact(facts, "python.gc.share", round(max(ms.values()) / step_ms, 4))
    found = _excess(ms, step_ms, params["gc_extra_min_share"], params["gc_extra_min_ratio"])
    if found is None:
        return facts
    r, excess, others = found
    g = recs[r]
    full = (g.get("by_generation") or {}).get("2") or {}
    windows = max(1, len(g.get("per_step_ms") or {}))
    facts.update(
        {
            "python.gc.rank": r,
            "python.gc.rank_ms_per_step": ms[r],
            "python.gc.extra_ms_per_step": round(excess, 3),
            "python.gc.extra_share": round(excess / step_ms, 4),
            "python.gc.others_ms_per_step": round(others, 3),
            "python.gc.full_collections": int(as_number(full.get("count")) or 0),
            "python.gc.window_steps": windows,
        }
    )
    max_ms = as_number(full.get("max_ms"))
    if max_ms is not None:
        facts["python.gc.max_pause_ms"] = round(max_ms, 1)
    return facts


def gil_facts(ranks: dict[int, dict], params: dict) -> dict:
    facts: dict = {}
    recs = {r: g for r, d in sorted(ranks.items()) if isinstance(g := evidence_of(d).get("gil"), dict)}
    if not recs:
        return facts
    starved = {
        r: round(sum(as_number(v) or 0.0 for v in (g.get("starved_ms_per_step") or {}).values()), 3)
        for r, g in recs.items()
    }
    put_fact(facts, "python.sampler_starved_ms_per_step", max(starved.values()), starved)
    cpu = {r: round(v, 3) for r, g in recs.items() if (v := as_number(g.get("cpu_starved_ms_per_step"))) is not None}
    if cpu:
        put_fact(facts, "python.sampler_cpu_starved_ms_per_step", max(cpu.values()), cpu)
    natives = {r: (g.get("native") or {}).get("sampler") for r, g in recs.items()}
    used = sorted({n for n in natives.values() if isinstance(n, str)})
    if used:
        facts["python.native_sampler"] = used[0]
    steps = [s for s in (_step_ms(ranks[r]) for r in recs) if s]
    if len(recs) < 2 or not steps:
        return facts
    step_ms = median(steps)
    calls = {
        r: {c["where"]: c for c in g.get("calls") or [] if isinstance(c, dict) and isinstance(c.get("where"), str)}
        for r, g in recs.items()
    }
    best = None
    releasing = set(params.get("gil_releasing_calls") or ())
    for where in sorted({w for c in calls.values() for w in c}):
        if where.split(" in ", 1)[0] in releasing:  # it gave the GIL back; the code before it held it
            continue
        per = {r: as_number(calls[r].get(where, {}).get("ms_per_step")) or 0.0 for r in recs}
        found = _excess(per, step_ms, params["gil_held_min_share"], params["gil_held_min_ratio"])
        if found is None or int(calls[found[0]][where].get("gaps") or 0) < params["gil_held_min_gaps"]:
            continue
        if best is None or found[1] > best[1]:
            best = (found[0], found[1], where)
    if best is not None:
        r, excess, where = best
        c = calls[r][where]
        facts.update(
            {
                "python.gil_held.rank": r,
                "python.gil_held.where": safe_where(where),
                "python.gil_held.ms_per_step": round(excess, 3),
                "python.gil_held.share": round(excess / step_ms, 4),
                "python.gil_held.gaps": int(c.get("gaps") or 0),
                "python.gil_held.source": str(c.get("source") or ""),
            }
        )
    return facts
