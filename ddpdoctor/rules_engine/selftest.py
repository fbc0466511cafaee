"""Run the test cases stored in rule files (``[[test]]``): each case gives facts and
what the rule must do with them (fire, stay quiet, abstain), and optionally text the
summary and the fixes must contain.  Used by the test suite and `ddpdoctor rules test`."""

from __future__ import annotations

import re

import numpy as np

from .engine import evaluate
from .expr import Vec
from .model import Rule, RuleCase

VECTOR_ROOTS = ("rank.", "step.")


def case_facts(case: RuleCase) -> dict:
    """Facts of a case: lists under rank.* / step.* become per-rank values (ranks 0, 1, …)."""
    out = {}
    ranks = case.facts.get("run.ranks")
    for k, v in case.facts.items():
        if k.startswith(VECTOR_ROOTS) and isinstance(v, list):
            labels = ranks if (ranks and len(ranks) == len(v) and k.startswith("rank.")) else list(range(len(v)))
            arr = np.asarray(v, dtype=object if any(isinstance(x, str) for x in v) else float)
            out[k] = Vec(arr, np.asarray(labels, dtype=int))
        else:
            out[k] = v
    out.setdefault("trace.present", True)
    return out


def _log_search(case: RuleCase):
    def search(patterns):
        hits = [e for e in case.log if any(re.search(p, str(e.get("line", ""))) for p in patterns)]
        first = hits[0] if hits else {}
        return {"count": len(hits), "ranks": sorted({int(e["rank"]) for e in hits if "rank" in e}),
                "first_rank": first.get("rank"), "first_time": first.get("time"),
                "first_line": first.get("line"), "first_file": first.get("file")}
    return search


def run_case(rule: Rule, case: RuleCase) -> list[str]:
    """Problems with this case (empty when it passes)."""
    out = evaluate(rule, case_facts(case), case.params, _log_search(case) if rule.log_patterns else None)
    problems = []
    if out.status == "error":
        return [out.error]
    if out.status != case.expect:
        extra = f" (missing: {', '.join(out.missing)})" if out.missing else ""
        problems.append(f"expected {case.expect}, got {out.status}{extra}")
    f = out.finding
    if f is not None:
        for text in case.summary_contains:
            if text not in f.summary:
                problems.append(f"summary lacks {text!r}: {f.summary!r}")
        blob = "\n".join(x.title + "\n" + x.change for x in f.fixes)
        for text in case.fixes_contain:
            if text not in blob:
                problems.append(f"no fix contains {text!r}; fixes: {[x.title for x in f.fixes]}")
        for text in case.fixes_exclude:
            if text in blob:
                problems.append(f"a fix contains {text!r}, which it must not here")
        if case.first_fix is not None and not (f.fixes and case.first_fix in f.fixes[0].title):
            problems.append(f"the first fix is not {case.first_fix!r}; fixes: {[x.title for x in f.fixes]}")
        if case.ranks is not None and f.ranks != case.ranks:
            problems.append(f"expected ranks {case.ranks}, got {f.ranks}")
    return problems
