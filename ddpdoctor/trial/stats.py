"""Step times of a recorded job and the speed-up between two arms, with a bootstrap interval."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..metrics.cross_rank import step_key

BOOTSTRAP_SAMPLES = 4000


def job_step_times_us(summaries) -> list[float]:
    """One time per recorded step of the job: the slowest rank's (every rank waits for it in DDP)."""
    by_step: dict = defaultdict(list)
    for s in summaries:
        for i, t in enumerate(s.values["step_time"]):
            if t is not None and np.isfinite(t):
                by_step[step_key(s, i)].append(float(t))
    return [max(v) for _k, v in sorted(by_step.items(), key=lambda kv: _step_order(kv[0]))]


def _step_order(key: str) -> tuple:
    """Recorded order of step keys ("9" before "10"; positional "#i" keys by i after numbered ones)."""
    k = str(key)
    if k.isdigit():
        return (0, int(k))
    if k.startswith("#") and k[1:].isdigit():
        return (1, int(k[1:]))
    return (2, k)


def cv(times: list[float]) -> float | None:
    x = np.asarray(times, dtype=float)
    return float(x.std() / x.mean()) if x.size >= 2 and x.mean() > 0 else None


def speedup(base: list[float], treat: list[float], seed: int = 0, center: str = "mean") -> tuple[float, float, float]:
    """center(base) / center(treat), and the 2.5/97.5 percentiles of the same ratio over bootstrap
    resamples of each arm's steps (each arm resampled on its own, with replacement).

    center "mean" (the default) is the job's time per step, what its wall time follows: a cost paid on
    some steps only (workers restarting at each epoch start, a periodic checkpoint) counts in full.
    "median" is the typical step, blind to any cost paid on fewer than half of the steps: a run whose
    every other step waited 80 ms for new workers measured 1.29x by medians and 3.3x by means."""
    b, t = np.asarray(base, dtype=float), np.asarray(treat, dtype=float)
    if b.size == 0 or t.size == 0:
        raise ValueError("an arm has no recorded steps")
    fn = {"mean": np.mean, "median": np.median}[center]
    ratio = float(fn(b) / fn(t))
    rng = np.random.default_rng(seed)
    bs = fn(rng.choice(b, size=(BOOTSTRAP_SAMPLES, b.size)), axis=1)
    ts = fn(rng.choice(t, size=(BOOTSTRAP_SAMPLES, t.size)), axis=1)
    lo, hi = np.percentile(bs / ts, [2.5, 97.5])
    return ratio, float(lo), float(hi)


def repeats_for(noise_cv: float | None, lo: int = 2, hi: int = 5, target_cv: float = 0.05) -> int:
    """Repeats per arm when the user gives none: 2 on a quiet host; more as the first pair's step times vary
    (the interval narrows with the square root of the repeats, so n grows with (cv / 5 %)², capped at 5)."""
    if noise_cv is None:
        return lo
    return int(min(hi, max(lo, np.ceil((noise_cv / target_cv) ** 2))))


# an arm whose first and second halves differ by more than this (their interval excluding 1 too) drifted
# within its window: set before any run from what the check guards against (a drift this size alone, from
# where the window sits, would read as a 1.2x change), not fitted to an example
STEADY_DRIFT = 1.2
MIN_STEADY_STEPS = 4  # fewer steps per arm: the check cannot be made (and says so)


def halves(runs: list[list[float]]) -> tuple[list[float], list[float]]:
    """The first and second halves of each run's steps (in recorded order), pooled over the arm's runs; the
    middle step of an odd-length run belongs to neither."""
    first, second = [], []
    for r in runs:
        h = len(r) // 2
        first += list(r[:h])
        second += list(r[len(r) - h :])
    return first, second


def drift_bound(drifted: list[dict]) -> float:
    """How far the drift of these arms (each a :func:`stationarity` result) could move the ratio of the arms' means
    at most: each arm's mean lies between its halves' means, so by its first/second ratio's outer 95 % bound."""
    bound = 1.0
    for st in drifted:
        lo, hi = st["ci95"]
        bound *= max(hi, 1.0 / lo, 1.0)
    return bound


def stationarity(runs: list[list[float]], drift: float = STEADY_DRIFT) -> dict:
    """First half against second half of an arm's steps (each run's first recorded step left out): mean(first)
    / mean(second) with its bootstrap 95 % interval. ``steady`` is False when the interval excludes 1 and the ratio lies beyond ``drift`` either way
    (the steps got faster or slower inside the window: a start still served from a prefetched buffer, a cache
    or allocator still warming); None when there are too few steps to tell."""
    # each run's first recorded step carries the profiler's start (1.3-4x the median of the rest in 12 of 14
    # arms of the issue-37 trials): a cost of the recording, not a drift of the job, so it is left out here
    first, second = halves([r[1:] if len(r) > 2 else r for r in runs])
    if len(first) + len(second) < MIN_STEADY_STEPS or not first or not second:
        return {"steady": None, "first_over_second": None, "ci95": None, "steps": len(first) + len(second)}
    ratio, lo, hi = speedup(first, second)
    drifted = (lo > 1.0 or hi < 1.0) and abs(np.log(ratio)) > np.log(drift)
    return {
        "steady": not drifted,
        "first_over_second": round(ratio, 3),
        "ci95": [round(lo, 3), round(hi, 3)],
        "steps": len(first) + len(second),
    }
