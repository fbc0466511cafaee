"""Step windows of one rank: where each training step starts and ends.

Preferred source: ``ProfilerStep#N`` host spans, extended (as the TensorBoard plugin
did) to the end of the GPU work launched inside each step, so that a step's time
includes the kernels it queued.  Fallbacks, said so in the output: the intervals
between consecutive ``Optimizer.step#`` ends, then the whole span of activity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace.classify import step_number
from ..trace.decode import RankTrace

PROFILER_STEP = "ProfilerStep"
OPTIMIZER_STEP = "optimizer steps"
ACTIVITY_SPAN = "activity span"


@dataclass(frozen=True)
class StepWindow:
    name: str
    number: int | None
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


def step_windows(rt: RankTrace) -> tuple[list[StepWindow], str]:
    if rt.steps:
        return _device_aligned(rt), PROFILER_STEP
    opt = [
        (e, n)
        for s, e, n in zip(rt.optimizer.start, rt.optimizer.end, rt.optimizer.names)
        if n.startswith("Optimizer.step#")
    ]
    opt.sort()
    if len(opt) >= 2:
        ends = [e for e, _ in opt]
        return [
            StepWindow(f"step {i + 1}", i + 1, a, b) for i, (a, b) in enumerate(zip(ends[:-1], ends[1:]))
        ], OPTIMIZER_STEP
    if rt.last_ts > rt.first_ts:
        return [StepWindow("activity span", None, rt.first_ts, rt.last_ts)], ACTIVITY_SPAN
    return [], ACTIVITY_SPAN


def _device_aligned(rt: RankTrace) -> list[StepWindow]:
    cpu_s = np.array([s for _, s, _ in rt.steps])
    cpu_e = np.array([e for _, _, e in rt.steps])
    n = cpu_s.size
    dev_start = np.full(n, np.inf)
    dev_end = np.full(n, -np.inf)
    gpu = rt.gpu
    launched = np.zeros(gpu.start.size, dtype=bool)
    if gpu.start.size and rt.runtime_corr.size:
        # GPU ops grouped by correlation id -> earliest start and latest end of each group
        order = np.argsort(gpu.correlation, kind="stable")
        corr = gpu.correlation[order]
        new_group = np.empty(corr.size, dtype=bool)  # sorted: np.unique(corr, return_index=True)
        new_group[:1] = True
        np.not_equal(corr[1:], corr[:-1], out=new_group[1:])
        first = np.flatnonzero(new_group)
        uniq = corr[first]
        g_start = np.minimum.reduceat(gpu.start[order], first)
        g_end = np.maximum.reduceat(gpu.end[order], first)
        rs, re_, rc = rt.runtime_launch.start, rt.runtime_launch.end, rt.runtime_corr
        pos = np.searchsorted(uniq, rc)
        pos_ok = pos < uniq.size
        hit = np.zeros(rc.size, dtype=bool)
        hit[pos_ok] = uniq[pos[pos_ok]] == rc[pos_ok]
        # the step whose host span fully contains the runtime call
        k = np.searchsorted(cpu_s, rs, side="right") - 1
        inside = hit & (k >= 0)
        inside[inside] &= re_[inside] <= cpu_e[k[inside]]
        ks, ps = k[inside], pos[inside]
        np.minimum.at(dev_start, ks, g_start[ps])
        np.maximum.at(dev_end, ks, g_end[ps])
        hit_group = np.zeros(uniq.size, dtype=bool)  # np.isin(gpu.correlation, uniq[np.unique(ps)])
        hit_group[ps] = True
        launched = np.empty(gpu.start.size, dtype=bool)
        launched[order] = hit_group[np.cumsum(new_group) - 1]
    prev_end = cpu_s[0]
    if np.isfinite(dev_start[0]):
        # GPU work queued before the window that finished before step 0's own work began
        before = ~launched & (gpu.end < dev_start[0])
        if before.any():
            prev_end = max(prev_end, float(gpu.end[before].max()))
    windows = []
    for i, (name, _, _) in enumerate(rt.steps):
        start = max(prev_end, cpu_s[i])
        end = max(cpu_e[i], dev_end[i]) if np.isfinite(dev_end[i]) else max(cpu_e[i], start)
        end = max(end, start)
        windows.append(StepWindow(name, step_number(name), float(start), float(end)))
        prev_end = end
    return windows
