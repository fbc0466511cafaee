"""Columnar helpers for :func:`ddpdoctor.trace.decode.normalize`: pull one field of every
event out of a list of msgspec structs at C speed, and classify repeated values once.

Each helper is one C-level pass (``map`` with ``attrgetter`` / ``dict.__getitem__`` /
``itemgetter``) or a numpy operation; none runs Python code per event, except the
fallbacks for odd field types, which keep the per-event path's exact results.
"""

from __future__ import annotations

from operator import attrgetter, itemgetter

import numpy as np

CAT, NAME, TID, PID, ARGS = (attrgetter(f) for f in ("cat", "name", "tid", "pid", "args"))
TS, DUR, EXT, CORR = (attrgetter(f) for f in ("ts", "dur", "external_id", "correlation"))


class PerValue(dict):
    """``fn(value)`` computed once per distinct value: ``map(d.__getitem__, values)`` runs in C
    and calls back into Python only for a value not seen before."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def __missing__(self, key):
        v = self[key] = self.fn(key)
        return v


def take(items: list, idx: np.ndarray) -> list:
    """``[items[i] for i in idx]`` at C speed."""
    if len(idx) == 0:
        return []
    if len(idx) == 1:
        return [items[int(idx[0])]]
    return list(itemgetter(*idx.tolist())(items))


def times(evs: list) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) arrays; an event without a positive duration ends where it starts."""
    ts = np.fromiter(map(TS, evs), dtype=np.float64, count=len(evs))
    dur = np.fromiter(map(DUR, evs), dtype=np.float64, count=len(evs))
    return ts, np.where(dur > 0, ts + dur, ts)


def equals(ids: list, value) -> np.ndarray:
    """``[x == value for x in ids]`` as a bool array; vectorised when every id is an int."""
    if isinstance(value, int) and not isinstance(value, bool):
        arr = np.array(ids)
        if arr.dtype.kind == "i":          # not when a string or a huge id is among them
            return arr == value
    return np.fromiter((x == value for x in ids), dtype=bool, count=len(ids))


def ext(args) -> int | str | None:
    if args is None:
        return None
    return args.external_id if args.external_id is not None else args.external_id_2021


def correlations(args: list) -> list:
    """``args.correlation`` per event, None where an event has no args."""
    if None in args:
        return [a.correlation if a is not None else None for a in args]
    return list(map(CORR, args))


def corr_array(values: list) -> np.ndarray:
    """int64 correlation ids, -1 where absent or not a number."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        return np.asarray([corr(c) for c in values], dtype=np.int64)


def corr(c) -> int:
    try:
        return int(c)
    except (TypeError, ValueError):
        return -1
