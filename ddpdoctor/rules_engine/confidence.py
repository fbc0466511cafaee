"""How sure a verdict is: :func:`calibrate` scales a rule's evidence by the coverage of ranks and steps,
the step-to-step noise its own mechanism leaves unexplained, and whether it was only inferred; with the
hints that say how to make it surer. Used by ddpdoctor/rules_engine/verdict.py."""

from __future__ import annotations

import numpy as np

from ..expr import Vec
from ..resources import metric_defaults


def _step_cv(facts: dict) -> float | None:
    """Median over ranks of the step-time coefficient of variation."""
    v = facts.get("step.step_time")
    if not isinstance(v, Vec) or not len(v.values):
        return None
    vals, ranks = v.values.astype(float), np.asarray(v.ranks)
    cvs = []
    for r in np.unique(ranks):
        x = vals[(ranks == r) & ~np.isnan(vals)]
        if x.size >= 2 and x.mean() > 0:
            cvs.append(float(x.std() / x.mean()))
    return float(np.median(cvs)) if cvs else None


def _unexplained_cv(facts: dict, columns: tuple[str, ...]) -> float | None:
    """The job's step-to-step variation that these step columns leave unexplained: per step, the slowest
    rank's time (DDP makes every rank wait for it) less the largest of those columns on any rank (a
    rank that waits for its peer's loader waits, in the end, for that loader); the spread of what is
    left, as a share of the mean job step. None unless every rank recorded the same number of steps."""
    v = facts.get("step.step_time")
    if not isinstance(v, Vec) or not len(v.values):
        return None
    ranks = np.asarray(v.ranks)
    names = np.unique(ranks)
    n = int((ranks == names[0]).sum())
    if n < 2 or any(int((ranks == r).sum()) != n for r in names):
        return None
    grid = lambda x: np.vstack([x[ranks == r] for r in names]).astype(float)  # noqa: E731 - rank x step
    times = grid(v.values)
    if not np.isfinite(times).any(axis=0).all():
        return None  # a step no rank timed
    job = np.nanmax(times, axis=0)
    explained = np.zeros(n)
    for col in columns:
        c = facts.get(f"step.{col}")
        if not isinstance(c, Vec) or len(c.values) != len(v.values) or not np.array_equal(np.asarray(c.ranks), ranks):
            return None
        explained = np.maximum(explained, np.nan_to_num(grid(c.values), nan=0.0).max(axis=0))
    mean = float(job.mean())
    return float((job - explained).std() / mean) if mean > 0 else None


def calibrate(
    evidence: float, rule: str, facts: dict, category: str | None = None, thresholds: dict | None = None
) -> tuple[float, list[str]]:
    """Confidence from the rule's evidence, the coverage of ranks and steps, noise and inference
    (``thresholds``: the analysis's rules/metrics.toml, default as shipped)."""
    t = (thresholds or metric_defaults())["verdict"]
    hints = []
    conf = evidence
    analyzed, world = facts.get("run.ranks_analyzed"), facts.get("run.world_size")
    if isinstance(analyzed, int) and isinstance(world, int) and world > analyzed > 0:
        cov = analyzed / world
        conf *= t["ranks_floor"] + (1 - t["ranks_floor"]) * cov
        conf = min(conf, t["partial_ranks_max"])
        chosen = facts.get("run.ranks_chosen")
        hints.append(
            f"only {analyzed} of {world} ranks were analyzed, chosen with --ranks {chosen}: drop --ranks "
            "to compare every rank"
            if chosen
            else f"only {analyzed} of {world} ranks were analyzed: record every rank "
            f"(ddpdoctor run records them all) to compare ranks"
        )
    steps = facts.get("run.steps")
    if isinstance(steps, int) and 0 < steps < t["full_steps"]:
        conf *= steps / t["full_steps"]
        hints.append(
            f"{steps} step{'' if steps == 1 else 's'} recorded: record at least {t['full_steps']} (ddpdoctor run --active 5)"
        )
    cv = _step_cv(facts)
    own = tuple(t.get("own_variation_columns", {}).get(category or "", ()))
    rest = _unexplained_cv(facts, own) if cv is not None and cv > t["cv_ok"] and own else None
    if rest is not None:
        cv = rest  # the variation the verdict's own mechanism explains is not noise
    if cv is not None and cv > t["cv_ok"]:
        bad = min(1.0, (cv - t["cv_ok"]) / (t["cv_bad"] - t["cv_ok"]))
        conf *= 1 - t["noise_penalty"] * bad
        what = "step times" if rest is None else "step times less the " + ", ".join(c.replace("_", " ") for c in own)
        hints.append(f"{what} vary by {cv:.0%} from step to step: re-record on an idle host or record more steps")
    if rule in t.get("inferred_rules", []):
        conf *= t["inferred_factor"]
        hints.append("inferred from the step pattern only: record with ddpdoctor run for the host's own evidence")
    return round(max(0.0, min(1.0, conf)), 3), hints
