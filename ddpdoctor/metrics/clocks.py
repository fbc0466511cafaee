"""Clock offsets between hosts, estimated from the collectives matched across ranks.

Every rank's trace is timed by its own host's clock; NTP keeps hosts only a few ms apart,
which is as much as the lateness that names a straggler.  All ranks leave a synchronizing
collective (all-reduce, all-gather, reduce-scatter, all-to-all, barrier) at nearly the same
instant, whoever arrived last, so the *end* times of one matched collective agree up to the
clock offsets.  Lateness does not move the ends, which is why they, not the starts, are used.

Method (all numpy, over the matched groups the cross-rank stage already built):

* unit of correction = the host.  Ranks on one host read one clock, so a host's end time in a
  collective is the median over its ranks' ends.  The reference is the host with the most ranks
  (ties: the host of the lowest rank); its offset is 0.
* a host's offset = the median over collectives of (its end − the reference's end); the noise
  is the robust spread of those differences (1.4826 × median absolute deviation).
* guards (rules/metrics.toml [clock]): fewer than ``min_collectives`` shared collectives, a
  spread above ``max_spread_us`` (ends that do not agree: drifting clocks, collectives that do
  not synchronize), or an offset below ``min_offset_us`` or below ``min_offset_over_spread``
  × the spread (not distinguishable from noise) — that host is not corrected (offset 0).
* one host: nothing to correct, the offset is exactly 0.  Host names unknown for some rank:
  no correction (one rank per unit would let a rank that wakes late from a collective on a busy
  CPU look like a clock), but per-rank offsets are estimated the same way and reported, with a
  note when one passes the guards.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

SYNC_KINDS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})
MAD_TO_SIGMA = 1.4826
DEFAULTS = {"min_collectives": 8, "max_spread_us": 1000.0, "min_offset_us": 100.0, "min_offset_over_spread": 3.0}


@dataclass
class ClockUnit:
    """One clock (a host, or a rank when host names are unknown) relative to the reference."""

    offset_us: float  # estimated: this clock minus the reference clock (µs)
    spread_us: float | None  # robust spread of the per-collective differences
    collectives: int  # collectives shared with the reference
    applied: bool  # corrected (else the start times are left as recorded)
    reason: str  # why (not) applied
    guarded: bool = False  # not applied although the offset may be real (too few or inconsistent ends)


@dataclass
class ClockEstimate:
    unit: str  # "host", "rank" or "none"
    reference: str | None = None  # the reference host (or "rank N")
    units: dict[str, ClockUnit] = field(default_factory=dict)
    applied: bool = False  # some unit corrected
    offset_us_by_rank: dict[int, float] = field(default_factory=dict)  # what was subtracted (0 = none)
    notes: list[str] = field(default_factory=list)
    suggested: str | None = None  # hosts unknown: the largest per-rank offset the ends suggest


def estimate_offsets(
    ends: np.ndarray, hosts: list[str | None], ranks: list[int], params: dict | None = None
) -> ClockEstimate:
    """Offsets from ``ends`` (collectives × ranks, NaN where a rank has no member of that
    collective), ``hosts`` and ``ranks`` per column.  Only synchronizing collectives belong in
    ``ends``."""
    p = {**DEFAULTS, **(params or {})}
    n_ranks = len(ranks)
    out = ClockEstimate(unit="none", offset_us_by_rank={r: 0.0 for r in ranks})
    if n_ranks < 2:
        return out
    if all(hosts):
        names = sorted(set(hosts))
        if len(names) == 1:
            out.reference = names[0]
            return out  # one clock: exactly 0, nothing applied
        out.unit = "host"
        cols = {h: [i for i, x in enumerate(hosts) if x == h] for h in names}
        ref = max(names, key=lambda h: (len(cols[h]), -min(ranks[i] for i in cols[h])))
    else:
        out.unit = "rank"
        cols = {f"rank {r}": [i] for i, r in enumerate(ranks)}
        ref = f"rank {min(ranks)}"
    out.reference = ref
    if ends.ndim != 2 or ends.shape[1] != n_ranks:
        raise ValueError("ends must be collectives x ranks")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: a unit absent from a collective
        per_unit = {u: np.nanmedian(ends[:, c], axis=1) if ends.size else np.zeros(0) for u, c in cols.items()}
    base = per_unit[ref]
    for u, v in per_unit.items():
        if u == ref:
            continue
        d = v - base
        d = d[np.isfinite(d)]
        out.units[u] = _judge(d, p)
    if out.unit == "host":
        for u, c in cols.items():
            unit = out.units.get(u)
            if unit is not None and unit.applied:
                for i in c:
                    out.offset_us_by_rank[ranks[i]] = unit.offset_us
        out.applied = any(x.applied for x in out.units.values())
        _host_notes(out)
    else:
        found = {u: x for u, x in out.units.items() if x.applied}
        for x in out.units.values():
            x.applied = False
            x.reason = "host names unknown: not corrected; " + x.reason
        if found:
            worst = max(found, key=lambda u: abs(found[u].offset_us))
            out.suggested = f"{worst} {found[worst].offset_us / 1000:+.2f} ms vs {ref}"
            out.notes.append(
                f"host names unknown, so clocks are not corrected, but collective end times suggest "
                f"offsets between ranks' clocks (largest: {out.suggested}); late arrival assumes the "
                "clocks agree"
            )
    return out


def _judge(d: np.ndarray, p: dict) -> ClockUnit:
    n = int(d.size)
    if n == 0:
        return ClockUnit(0.0, None, 0, False, "no collective shared with the reference")
    off = float(np.median(d))
    spread = float(MAD_TO_SIGMA * np.median(np.abs(d - off)))
    if n < p["min_collectives"]:
        why = f"only {n} collective{'' if n == 1 else 's'} shared with the reference (need {p['min_collectives']})"
        return ClockUnit(off, spread, n, False, why, guarded=True)
    if spread > p["max_spread_us"]:
        why = f"end-time differences inconsistent (spread {spread:.0f} µs > {p['max_spread_us']:.0f} µs)"
        return ClockUnit(off, spread, n, False, why, guarded=True)
    if abs(off) < p["min_offset_us"]:
        why, ok = f"offset {off:.0f} µs below {p['min_offset_us']:.0f} µs", False
    elif abs(off) < p["min_offset_over_spread"] * spread:
        why, ok = f"offset {off:.0f} µs within the noise (spread {spread:.0f} µs)", False
    else:
        why, ok = f"median of {n} collectives, spread {spread:.0f} µs", True
    return ClockUnit(off, spread, n, ok, why)


def _host_notes(out: ClockEstimate) -> None:
    done = {u: x for u, x in out.units.items() if x.applied}
    if done:
        parts = ", ".join(f"{u} {x.offset_us / 1000:+.2f} ms" for u, x in sorted(done.items()))
        out.notes.append(f"clock offsets corrected before late arrival and sync wait (vs {out.reference}): {parts}")
    if not done and not any(x.guarded for x in out.units.values()):
        worst = max(abs(x.offset_us) for x in out.units.values())
        out.notes.append(
            f"ranks span {len(out.units) + 1} hosts whose collective end times agree within "
            f"{worst:.0f} µs: clocks not corrected"
        )
    for u, x in sorted(out.units.items()):
        if x.guarded:
            out.notes.append(
                f"clock of {u} not corrected ({x.reason}): its arrival times assume it agrees with {out.reference}"
            )


def end_matrix(groups: list[list[tuple[int, float]]], ranks: list[int]) -> np.ndarray:
    """collectives × ranks matrix of end times (NaN where absent) from groups of (rank, end)."""
    col = {r: i for i, r in enumerate(ranks)}
    m = np.full((len(groups), len(ranks)), np.nan)
    if groups:
        gi = np.fromiter((g for g, members in enumerate(groups) for _ in members), dtype=np.int64)
        ri = np.fromiter((col[r] for members in groups for r, _ in members), dtype=np.int64)
        ev = np.fromiter((e for members in groups for _, e in members), dtype=float)
        m[gi, ri] = ev
    return m
