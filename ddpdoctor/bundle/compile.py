"""Facts on torch.compile compilations in the recorded window, from each rank's
``settings.json`` ``compile`` record (written by capture/agent/compile.py).

``compile_facts(ranks)``: ``ranks`` = {rank: settings dict}.  Ranks compile the same graphs, so
a run's value is the median over the ranks that recorded one (``.per_rank`` where they differ);
the compile time's share is of the rank's own window.  No record (an older bundle, a window
cut short) or no torch.compile: the ``compile.*`` facts are absent, except ``compile.used``.
Pure Python: no torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from statistics import median

from .values import as_number, put_fact, safe_where

_SIZE_GUARD = re.compile(r"size mismatch at index (\d+)")


def _record(d: dict) -> dict | None:
    rec = d.get("compile")
    return rec if isinstance(rec, dict) else None


def _median(values: Mapping[int, float]) -> float:
    return median(values.values())


def compile_facts(ranks: dict[int, dict]) -> dict:
    facts: dict = {}
    recs = {r: rec for r, d in sorted(ranks.items()) if (rec := _record(d)) is not None}
    if not recs:
        return facts
    used = {r: rec.get("used") is True for r, rec in recs.items()}
    put_fact(facts, "compile.used", any(used.values()), used)
    measured = {
        r: rec
        for r, rec in recs.items()
        if used[r]
        and (as_number(rec.get("window_ms")) or 0) > 0
        and isinstance(rec.get("steps"), list)
        and rec["steps"]
    }
    if not measured:
        return facts
    compiles = {r: int(as_number(rec.get("compiles")) or 0) for r, rec in measured.items()}
    ms = {r: as_number(rec.get("compile_ms")) or 0.0 for r, rec in measured.items()}
    share = {r: round(ms[r] / float(rec["window_ms"]), 4) for r, rec in measured.items()}  # a number > 0: above
    per_step = {r: round(ms[r] / len(rec["steps"]), 3) for r, rec in measured.items()}
    steps_with = {
        r: sum(1 for s in rec["steps"] if isinstance(s, dict) and (as_number(s.get("compiles")) or 0) > 0)
        for r, rec in measured.items()
    }
    put_fact(facts, "compile.window_compiles", round(_median(compiles)), compiles)
    put_fact(facts, "compile.steps_compiling", round(_median(steps_with)), steps_with)
    put_fact(facts, "compile.ms_per_step", round(_median(per_step), 3), per_step)
    put_fact(facts, "compile.share", round(_median(share), 4), share)
    limits = {r: int(v) for r, rec in measured.items() if (v := as_number(rec.get("recompile_limit"))) is not None}
    if limits:
        put_fact(facts, "compile.recompile_limit", min(limits.values()), limits)
    reasons: dict[str, dict] = {}
    for rec in measured.values():
        for item in rec.get("reasons") or []:
            if isinstance(item, dict) and isinstance(item.get("guard"), str):
                r = reasons.setdefault(item["guard"], {"count": 0, "example": item["guard"]})
                r["count"] += int(as_number(item.get("count")) or 0)
                if isinstance(item.get("example"), str):
                    r["example"] = item["example"]
    if reasons:
        top = max(sorted(reasons), key=lambda k: reasons[k]["count"])
        put_fact(facts, "compile.reason", safe_where(reasons[top]["example"]))
        put_fact(facts, "compile.reason_count", reasons[top]["count"])
        dim = _SIZE_GUARD.search(top)
        if dim:
            facts["compile.size_dim"] = int(dim.group(1))
    return facts
