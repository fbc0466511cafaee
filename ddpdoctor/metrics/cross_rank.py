"""Cross-rank stage: works only on compact :class:`RankSummary` objects.

* Collectives are matched across ranks by step, kind and order.  A collective's time
  on each rank includes waiting for late peers: the time before the last peer arrived,
  capped by the rank's excess over the shortest duration across ranks, is synchronization
  wait; the rest is transfer.
* Lateness per step is judged over all of the step's matched collectives, each weighted by the
  wait it causes (how long the first rank to arrive waits for the last), so a tiny all-gather
  at the start of an FSDP step cannot name the wrong rank; a step whose collectives cause no
  wait falls back on the first collective.  Late ranks are stragglers.
* A rank's sync wait in a step is the union of its wait intervals (collectives that run at
  once on different threads are not counted twice), and never more than its time in collectives.
* Clocks of different hosts are aligned first (:mod:`.clocks`): each host's offset, estimated
  from the end times of matched synchronizing collectives, is subtracted from its ranks'
  collective start times before late arrival and sync wait are computed.
* Step-time spread and an imbalance score (1 − mean/max of per-rank busy time, where
  busy = step time − sync wait) summarize how uneven the ranks are.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from statistics import median

import numpy as np

from ..resources import metric_defaults
from .breakdown import RankSummary
from .clocks import DEFAULTS as CLOCK_DEFAULTS
from .clocks import SYNC_KINDS, ClockEstimate, end_matrix, estimate_offsets


@dataclass
class Straggler:
    rank: int
    late_us: float  # median over steps of (arrival − median arrival of the other ranks)
    late_share: float  # of the median step time
    steps_late: int  # steps in which this rank arrived last
    steps: int


@dataclass
class CrossRank:
    ranks: list[int]
    matched_collectives: int = 0
    unmatched_collectives: int = 0
    step_time_spread_us: float | None = None  # median over steps of max − min step time
    step_time_spread_share: float | None = None  # ... relative to the median step time
    arrival_late_us: dict[int, float] = field(default_factory=dict)  # rank -> median lateness vs the others
    arrival_by_step: dict[str, dict[int, float]] = field(default_factory=dict)
    stragglers: list[Straggler] = field(default_factory=list)
    imbalance_score: float | None = None
    input_shapes_by_rank: dict[int, str] = field(default_factory=dict)  # rank -> its most frequent forward input shapes
    per_rank: dict[int, dict[str, float | None]] = field(default_factory=dict)
    clock_offset_us: dict[int, float] = field(default_factory=dict)  # rank -> offset subtracted (0 = none)
    clock: ClockEstimate | None = None  # how the offsets were estimated, per host (or rank)
    notes: list[str] = field(default_factory=list)


def step_key(summary: RankSummary, i: int) -> str:
    w = summary.steps[i]
    return str(w.number) if w.number is not None else f"#{i}"


def analyze_cross_rank(summaries: list[RankSummary], thresholds: dict | None = None) -> CrossRank:
    """``thresholds``: the analysis's rules/metrics.toml ([straggler], [clock]; default: as shipped)."""
    t = thresholds or metric_defaults()
    out = CrossRank(ranks=[s.rank for s in summaries])
    if len(summaries) < 2:
        out.notes.append(
            "one rank only: collectives cannot be matched across ranks "
            "(sync wait, transfer, late arrival and stragglers need at least two ranks)"
        )
        _per_rank_means(summaries, out)
        return out
    groups = _match_collectives(summaries, out, t.get("clock"))
    _arrivals(summaries, groups, out, t["straggler"])
    _shapes_by_rank(summaries, out)
    _spread_and_imbalance(summaries, out)
    _per_rank_means(summaries, out)
    return out


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


Group = list[tuple[RankSummary, int, float, float]]  # (rank summary, step index, start, duration)


def _match_collectives(summaries: list[RankSummary], out: CrossRank, clock: dict | None) -> dict[tuple, Group]:
    groups: dict[tuple, Group] = defaultdict(list)
    for s in summaries:
        c = s.collectives
        seen: dict[tuple, int] = defaultdict(int)
        dur = c.duration
        for j in range(len(c)):
            base = (step_key(s, int(c.step[j])), c.kind[j])
            groups[base + (seen[base],)].append((s, int(c.step[j]), float(c.start[j]), float(dur[j])))
            seen[base] += 1
    offsets = _align_clocks(summaries, groups, out, clock)
    if any(offsets.values()):
        groups = defaultdict(list, {k: [(s, i, t - offsets[s.rank], d) for s, i, t, d in v] for k, v in groups.items()})
    waits: dict[tuple[int, int], list] = defaultdict(list)  # (rank, step) -> wait intervals
    spans: dict[tuple[int, int], list] = defaultdict(list)  # (rank, step) -> collective intervals
    for members in groups.values():
        if len(members) < 2:
            out.unmatched_collectives += 1
            continue
        out.matched_collectives += 1
        shortest = min(d for _, _, _, d in members)
        last_arrival = max(t for _, _, t, _ in members)
        for s, i, t, d in members:
            # waiting = time in the collective before the last peer arrived, and never more than
            # this rank's excess over the quickest rank (a rank slowed by its own CPU is not waiting)
            w = min(d - shortest, max(0.0, last_arrival - t))
            waits[(s.rank, i)].append((t, t + w))
            spans[(s.rank, i)].append((t, t + d))
    if out.unmatched_collectives:
        out.notes.append(
            (
                f"{out.unmatched_collectives} collective{'' if out.unmatched_collectives == 1 else 's'} seen on one "
                f"rank only {'was' if out.unmatched_collectives == 1 else 'were'} not matched"
            )
        )
    for s in summaries:
        if len(s.collectives) == 0:
            continue
        wait = [_union_length(waits.get((s.rank, i), [])) for i in range(len(s.steps))]
        busy = [_union_length(spans.get((s.rank, i), [])) for i in range(len(s.steps))]
        s.values["comm_sync_wait"] = [float(w) for w in wait]
        s.values["comm_transfer"] = [float(max(0.0, b - w)) for b, w in zip(busy, wait)]
        _timeline_waits(s, waits, offsets.get(s.rank, 0.0))
    return {k: v for k, v in groups.items() if len(v) >= 2}


def _timeline_waits(s: RankSummary, waits: dict, offset: float) -> None:
    """Split the representative step's exposed communication into the wait for late peers
    (``comm_sync_wait`` segments) and the rest, so the timeline plot shows a waiting rank waiting."""
    t = s.timeline
    segs = (t or {}).get("segments") or {}
    if not segs.get("comm_exposed"):
        return
    i = next((k for k, w in enumerate(s.steps) if w.name == t.get("step")), None)
    if i is None:
        return
    lo = s.steps[i].start
    wait = sorted((a + offset - lo, b + offset - lo) for a, b in waits.get((s.rank, i), []) if b > a)
    inside = [[max(a, x), min(b, y)] for a, b in segs["comm_exposed"] for x, y in wait if min(b, y) > max(a, x)]
    if not inside:
        return
    rest = []
    for a, b in segs["comm_exposed"]:
        cur = a
        for x, y in inside:
            if y <= cur or x >= b:
                continue
            if x > cur:
                rest.append([cur, x])
            cur = max(cur, y)
        if cur < b:
            rest.append([cur, b])
    segs["comm_sync_wait"] = [[round(a, 1), round(b, 1)] for a, b in _merge(inside)]
    segs["comm_exposed"] = [[round(a, 1), round(b, 1)] for a, b in rest if b - a > 0.05]


def _merge(pieces: list[list[float]]) -> list[list[float]]:
    out: list[list[float]] = []
    for a, b in sorted(pieces):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _align_clocks(
    summaries: list[RankSummary], groups: dict[tuple, Group], out: CrossRank, clock: dict | None
) -> dict[int, float]:
    """Estimate the hosts' clock offsets from the matched synchronizing collectives' end times
    (rank -> µs to subtract; all 0 on one host, with unknown hosts or when a guard holds)."""
    ranks = [s.rank for s in summaries]
    sync = [[(s.rank, t + d) for s, _, t, d in v] for k, v in groups.items() if len(v) >= 2 and k[1] in SYNC_KINDS]
    params = {**CLOCK_DEFAULTS, **(clock or {})}
    est = estimate_offsets(end_matrix(sync, ranks), [s.host for s in summaries], ranks, params)
    out.clock = est
    out.clock_offset_us = dict(est.offset_us_by_rank)
    out.notes += est.notes
    return est.offset_us_by_rank


def _arrivals(summaries: list[RankSummary], groups: dict[tuple, Group], out: CrossRank, params: dict) -> None:
    by_step: dict[str, list[Group]] = defaultdict(list)
    for key, members in groups.items():
        by_step[key[0]].append(members)
    step_times = [t for s in summaries for t in s.values["step_time"]]
    late: dict[int, list[float]] = defaultdict(list)
    last_count: dict[int, int] = defaultdict(int)
    steps = 0
    for key, colls in by_step.items():
        colls.sort(key=lambda g: min(t for _, _, t, _ in g))
        rel_sum: dict[int, float] = defaultdict(float)
        weight_sum: dict[int, float] = defaultdict(float)
        for members in colls:
            arrivals = {s.rank: t for s, _, t, _ in members}
            # the wait this collective causes: the first rank in waits until the last one comes
            weight = max(arrivals.values()) - min(arrivals.values())
            for r, t in arrivals.items():
                rel_sum[r] += weight * (t - median(t2 for r2, t2 in arrivals.items() if r2 != r))
                weight_sum[r] += weight
        first = {s.rank: t for s, _, t, _ in colls[0]}
        ranks = sorted(weight_sum)
        if len(ranks) < 2:
            continue
        steps += 1
        rel = {}
        for r in ranks:
            if weight_sum[r] > 0:
                rel[r] = rel_sum[r] / weight_sum[r]
            elif r in first and len(first) > 1:
                rel[r] = first[r] - median(t for r2, t in first.items() if r2 != r)
        if not rel:
            continue
        out.arrival_by_step[key] = rel
        for r, v in rel.items():
            late[r].append(v)
        last_count[max(rel, key=rel.get)] += 1
    if not steps:
        return
    out.arrival_late_us = {r: float(median(v)) for r, v in sorted(late.items())}
    med_step = median(step_times) if step_times else 0.0
    latest = max(out.arrival_late_us.values())
    for r, lateness in out.arrival_late_us.items():
        share = lateness / med_step if med_step > 0 else 0.0
        if (
            lateness >= params["min_late_us"]
            and share >= params["min_late_share"]
            and lateness >= params["min_share_of_latest"] * latest
        ):
            out.stragglers.append(Straggler(r, lateness, share, last_count.get(r, 0), steps))
    out.stragglers.sort(key=lambda x: -x.late_us)


def _shapes_by_rank(summaries: list[RankSummary], out: CrossRank) -> None:
    """Which rank's forward received which input shapes (its most frequent ones)."""
    for s in summaries:
        shapes = [x for x in (s.input_shapes or []) if x]
        if shapes:
            out.input_shapes_by_rank[s.rank] = max(set(shapes), key=lambda x: (shapes.count(x), x))


def _spread_and_imbalance(summaries: list[RankSummary], out: CrossRank) -> None:
    by_step: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in summaries:
        waits = s.values["comm_sync_wait"]
        for i, t in enumerate(s.values["step_time"]):
            by_step[step_key(s, i)].append((t, waits[i] or 0.0))
    spreads, rel, scores = [], [], []
    for rows in by_step.values():
        if len(rows) < 2:
            continue
        times = [t for t, _ in rows]
        spreads.append(max(times) - min(times))
        m = median(times)
        rel.append((max(times) - min(times)) / m if m > 0 else 0.0)
        busy = [t - w for t, w in rows]
        if max(busy) > 0:
            scores.append(1.0 - (sum(busy) / len(busy)) / max(busy))
    if spreads:
        out.step_time_spread_us = float(median(spreads))
        out.step_time_spread_share = float(median(rel))
    if scores:
        out.imbalance_score = float(np.mean(scores))


def _per_rank_means(summaries: list[RankSummary], out: CrossRank) -> None:
    for s in summaries:
        row = {}
        for col in ("step_time", "compute", "comm", "comm_exposed", "comm_sync_wait", "dataloader_wait"):
            vals = [v for v in s.values[col] if v is not None]
            row[col] = float(np.mean(vals)) if vals else None
        out.per_rank[s.rank] = row
