"""How far a finding is from the threshold that made it fire, in the step-to-step noise of what it measured.

A rule that declares ``edge = { value = "<per-(rank, step) expression>", threshold = "<expression>" }`` (the
measurement its ``when`` compares with a threshold) gets an :class:`Edge`: the mean of that measurement over the
recorded steps (median over ranks), the standard error of that mean (the spread of the job's steps over the
square root of their number: how much another recording of as many steps would move it), and the distance to the
threshold in those standard errors. Within ``[verdict] edge_noise`` of them the finding is *at its line*: a
re-recording may land on either side, so it decides no verdict (verdict.ranked_costs) and the verdict says so;
up to ``edge_clear`` its distance lowers the verdict's confidence (confidence.calibrate).
Used by rules_engine/engine.py (per finding) and rules_engine/verdict.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..expr import Vec


@dataclass
class Edge:
    threshold: float
    value: float  # the measurement's mean over the recorded steps, median over ranks
    noise: float  # the standard error of that mean (0: the steps agree exactly)
    distance: float  # |value - threshold| / noise (inf when noise is 0)
    at_line: bool  # within [verdict] edge_noise standard errors of the threshold


def measure(values, threshold, edge_noise: float) -> Edge | None:
    """The edge of one finding, from its per-(rank, step) values and its threshold; None when the values are
    not a per-step vector with at least two steps on some rank, or the threshold is not a number.

    The noise is that of the job's step, not of one rank's: when every rank recorded the same steps, the
    standard error is taken of the per-step mean over ranks (a loader with 2 workers feeds rank 0 and rank 1
    in turn, so each rank's wait alternates between 0 and 80 % while the job waits about the same every step:
    io_wait_loader_workers2); otherwise of each rank's steps, the median over ranks."""
    if not isinstance(values, Vec) or isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        return None
    x, ranks = np.asarray(values.values, dtype=float), np.asarray(values.ranks)
    per_rank = [x[ranks == r] for r in np.unique(ranks)]
    usable = [v[np.isfinite(v)] for v in per_rank]
    usable = [v for v in usable if v.size >= 2]
    if not usable:
        return None
    value, thr = float(np.median([v.mean() for v in usable])), float(threshold)
    n = per_rank[0].size
    if len(per_rank) > 1 and all(v.size == n for v in per_rank) and n >= 2:
        with np.errstate(all="ignore"):
            steps = np.nanmean(np.vstack(per_rank), axis=0)  # the job's step: the mean over ranks
        steps = steps[np.isfinite(steps)]
    else:
        steps = None
    if steps is not None and steps.size >= 2:
        noise = float(steps.std(ddof=1)) / math.sqrt(steps.size)
    else:
        noise = float(np.median([v.std(ddof=1) for v in usable])) / math.sqrt(
            float(np.median([v.size for v in usable]))
        )
    gap = abs(value - thr)
    distance = gap / noise if noise > 0 else (math.inf if gap > 0 else 0.0)
    return Edge(round(thr, 6), round(value, 6), round(noise, 6), round(distance, 3), distance < edge_noise)


def confidence_factor(edge: Edge | None, t: dict) -> float:
    """1 from ``edge_clear`` standard errors on; from ``edge_noise`` to there, from ``edge_floor`` up to 1."""
    if edge is None or edge.distance >= t["edge_clear"]:
        return 1.0
    if edge.distance < t["edge_noise"]:
        return t["edge_floor"]
    span = t["edge_clear"] - t["edge_noise"]
    return t["edge_floor"] + (1 - t["edge_floor"]) * (edge.distance - t["edge_noise"]) / span


def pct(x: float) -> str:
    """'10 %' (a whole percent), '0.5 %' under 1 %."""
    return f"{100 * x:.0f} %" if round(100 * x) >= 1 else f"{100 * x:.1f} %"


def _measured(e: Edge) -> str:
    return (
        f"{100 * e.value:.1f} % of the step ± {100 * 2 * e.noise:.1f} % (two standard errors over the recorded steps)"
    )


def at_line_reason(f) -> str:
    """Why a finding at its line decides no verdict (the Cost's why_not)."""
    return (
        f"{_measured(f.edge)} against {f.rule}'s {pct(f.edge.threshold)} threshold: within the step-to-step noise, "
        "another recording may land on either side"
    )


def edge_confidence(conf: float, hints: list[str], top, t: dict) -> tuple[float, list[str]]:
    """The deciding finding's distance to its own threshold scales its confidence (:func:`confidence_factor`)."""
    factor = confidence_factor(top.edge, t)
    if factor >= 1.0:
        return conf, hints
    e = top.edge
    hint = (
        f"{_measured(e)} is near {top.rule}'s {pct(e.threshold)} threshold: record more steps "
        "(ddpdoctor run --active 20) to be surer"
    )
    return round(conf * factor, 3), [hint, *hints]


def name_at_line(v, costs: list, by_rule: dict, label, t: dict) -> None:
    """A material cost set aside at its line that would have decided otherwise is named beside the verdict
    ("compute-bound; communication at the 10 % line"), caps the verdict's confidence under "high"
    (``at_line_max_confidence``: the verdict would flip with it), and says how to settle it. ``label(confidence)`` names a confidence (verdict._label)."""
    # only a cost that would have decided instead: ranked before the verdict's own (a 11 % transfer at its line
    # beside a 78 % DataLoader wait changes nothing, and naming it would make the label vary from run to run)
    ahead = costs[: next((n for n, c in enumerate(costs) if c.rule == v.rule), len(costs))]
    # ... and of another category: a communication cost at its line beside another communication finding would
    # flip which rule speaks, not what the job is bound by ("communication-bound; communication at the 10 % line")
    near = [c for c in ahead if c.at_line and c.material and c.category != v.bottleneck]
    if not near:
        return
    named = v.label or (f"{v.bottleneck}-bound" if v.bottleneck else "no dominant avoidable cost")
    v.label = "; ".join([named] + [f"{c.category} at the {pct(by_rule[c.rule].edge.threshold)} line" for c in near])
    first = by_rule[near[0].rule]
    what = near[0].category.capitalize()
    v.summary += (
        f" {what} ({first.rule}) is at its line: {_measured(first.edge)} against its {pct(first.edge.threshold)} "
        "threshold, so another recording may land on either side; it does not decide the verdict."
    )
    if v.confidence is not None:
        v.confidence = min(v.confidence, t["at_line_max_confidence"])
        v.confidence_label = label(v.confidence)
    v.confidence_hints.insert(
        0,
        f"{near[0].category} is within the step-to-step noise of its {pct(first.edge.threshold)} threshold: "
        "record more steps (ddpdoctor run --active 20) to tell which side it is on",
    )
