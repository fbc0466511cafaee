"""Interval sets as sorted, disjoint numpy arrays, and their measure inside windows.

An interval set is a pair ``(starts, ends)`` of float64 arrays, sorted, with
``starts[i] < ends[i] <= starts[i + 1]``.  Every operation here is vectorized: the
hot path of the per-step breakdown runs on hundreds of thousands of kernels.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Intervals(NamedTuple):
    starts: np.ndarray
    ends: np.ndarray

    def __len__(self) -> int:  # number of disjoint pieces
        return int(self.starts.size)

    @property
    def total(self) -> float:
        return float((self.ends - self.starts).sum())


EMPTY = Intervals(np.empty(0), np.empty(0))


def union(starts, ends) -> Intervals:
    """Merge possibly overlapping intervals into a disjoint sorted set."""
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return EMPTY
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # a new piece starts where the interval begins after everything before it ended
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return Intervals(s[first], run_end[last])


def merge(*sets: Intervals) -> Intervals:
    """Union of several interval sets."""
    sets = [x for x in sets if len(x)]
    if not sets:
        return EMPTY
    return union(np.concatenate([x.starts for x in sets]), np.concatenate([x.ends for x in sets]))


def _combine(a: Intervals, b: Intervals, keep_a_not_b: bool) -> Intervals:
    if len(a) == 0:
        return EMPTY
    if len(b) == 0:
        return a if keep_a_not_b else EMPTY
    pts = np.concatenate([a.starts, a.ends, b.starts, b.ends])
    da = np.concatenate([np.ones(len(a)), -np.ones(len(a)), np.zeros(2 * len(b))])
    db = np.concatenate([np.zeros(2 * len(a)), np.ones(len(b)), -np.ones(len(b))])
    order = np.argsort(pts, kind="stable")
    pts, da, db = pts[order], da[order], db[order]
    in_a = np.cumsum(da) > 0.5
    in_b = np.cumsum(db) > 0.5
    cond = in_a & ~in_b if keep_a_not_b else in_a & in_b
    # cond[i] holds on the segment [pts[i], pts[i+1])
    seg_s, seg_e = pts[:-1], pts[1:]
    sel = cond[:-1] & (seg_e > seg_s)
    if not sel.any():
        return EMPTY
    return union(seg_s[sel], seg_e[sel])


def difference(a: Intervals, b: Intervals) -> Intervals:
    """Parts of ``a`` not covered by ``b``."""
    return _combine(a, b, keep_a_not_b=True)


def intersection(a: Intervals, b: Intervals) -> Intervals:
    return _combine(a, b, keep_a_not_b=False)


def measure_in_windows(x: Intervals, win_starts, win_ends) -> np.ndarray:
    """Length of ``x`` inside each window ``[win_starts[i], win_ends[i])``."""
    ws = np.asarray(win_starts, dtype=np.float64)
    we = np.asarray(win_ends, dtype=np.float64)
    if len(x) == 0 or ws.size == 0:
        return np.zeros(ws.size)
    cum = np.concatenate([[0.0], np.cumsum(x.ends - x.starts)])

    def covered_before(t: np.ndarray) -> np.ndarray:
        # total length of x in (-inf, t)
        i = np.searchsorted(x.ends, t, side="right")  # pieces entirely before t
        part = np.zeros_like(t)
        inside = i < len(x)
        j = i[inside]
        part[inside] = np.clip(t[inside] - x.starts[j], 0.0, None)
        return cum[i] + part

    return np.clip(covered_before(we) - covered_before(ws), 0.0, None)
