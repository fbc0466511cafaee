"""The msgspec reader: a trace decoded into trace/schema.py's structs, as :class:`~.columns.Columns`
(the files the compiled reader does not take: not built, irregular JSON, a bare event list, ...).

Each column is one C-level pass over the event list (``map`` with ``attrgetter`` and
``dict.__getitem__``, ``numpy.fromiter``), so no Python code runs per event except where a field
has an odd type (a string or huge id), which takes a slower exact path.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_, is_not

import numpy as np

from .columns import EXT_STR, HAS_CORR, HAS_EXT, PID_STR, TID_STR, Columns
from .schema import Args, Trace

PH, CAT, NAME, PID, TID, TS, DUR, ARGS = map(attrgetter, ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args"))
CORR, EXT, EXT_2021, COLL, DTYPE, NELEMS, DIMS = map(attrgetter, (
    "correlation", "external_id", "external_id_2021", "collective", "dtype", "in_nelems", "input_dims"))
_NO_ARGS = Args()
_I64 = (-(1 << 63), 1 << 63)


class _Table(dict):
    """Distinct values -> ids (in first-seen order): ``map(table.__getitem__, values)`` runs in C and
    calls back into Python only for a value not seen before; None is -1."""

    def __init__(self):
        super().__init__({None: -1})
        self.values: list = []

    def __missing__(self, key):
        v = self[key] = len(self.values)
        self.values.append(key)
        return v

    def ids(self, values, n: int) -> np.ndarray:
        return np.fromiter(map(self.__getitem__, values), dtype=np.int32, count=n)


@dataclass
class StructArgs:
    """:class:`~.columns.ArgValues` read from the decoded structs."""

    args: list[Args]

    def in_nelems(self, i: int) -> int | float | str | None:
        return self.args[i].in_nelems

    def input_dims(self, i: int) -> str:
        return bytes(self.args[i].input_dims).decode("utf-8", "replace")


def columns(trace: Trace) -> Columns:
    evs = trace.traceEvents
    evs = list(compress(evs, map("X".__eq__, map(PH, evs))))
    n = len(evs)
    table = _Table()
    ts = np.fromiter(map(TS, evs), dtype=np.float64, count=n)
    dur = np.fromiter(map(DUR, evs), dtype=np.float64, count=n)
    cat, name = table.ids(map(CAT, evs), n), table.ids(map(NAME, evs), n)
    pid, pid_obj = _id_column(list(map(PID, evs)), table)
    tid, tid_obj = _id_column(list(map(TID, evs)), table)
    args = list(map(ARGS, evs))
    del evs
    if None in args:
        filled = np.array(args, dtype=object)
        filled[_is_none(args)] = _NO_ARGS
        args = filled.tolist()
    corr, has_corr = _corr_column(list(map(CORR, args)))
    ext, has_ext, ext_obj = _ext_column(args, table)
    flags = (pid_obj * PID_STR + tid_obj * TID_STR + has_corr * HAS_CORR + has_ext * HAS_EXT
             + ext_obj * EXT_STR).astype(np.uint8)
    return Columns(
        n=n, ts=ts, dur=dur, cat=cat, name=name, coll=table.ids(map(COLL, args), n),
        dtype=table.ids(map(DTYPE, args), n), pid=pid, tid=tid, corr=corr, ext=ext, flags=flags,
        has_dims=np.fromiter(map(bool, map(DIMS, args)), dtype=bool, count=n),
        has_msg=~_is_none(list(map(NELEMS, args))), strings=table.values, args=StructArgs(args))


def _is_none(values: list) -> np.ndarray:
    return np.fromiter(map(is_, values, repeat(None)), dtype=bool, count=len(values))


def _ext_column(args: list[Args], table: _Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """args "External id" (2021 traces: "external id") as an id column: (values, present, is an id
    into the table)."""
    values = list(map(EXT, args))
    missing = _is_none(values)
    if missing.any():
        obj = np.array(values, dtype=object)
        obj[missing] = np.array(list(map(EXT_2021, args)), dtype=object)[missing]
        missing = _is_none(obj.tolist())
        obj[missing] = 0
        values = obj.tolist()
    col, is_obj = _id_column(values, table)
    return col, ~missing, is_obj & ~missing


def _id_column(values: list, table: _Table) -> tuple[np.ndarray, np.ndarray]:
    """An int-or-string id column: (int64 values, bool "is an id into the table"); strings and ints
    beyond int64 go into the table."""
    n = len(values)
    if set(map(type, values)) <= {int}:        # numpy would read a string of digits as its number
        try:
            return np.fromiter(values, dtype=np.int64, count=n), np.zeros(n, dtype=bool)
        except OverflowError:
            pass
    is_str = np.fromiter(map(isinstance, values, repeat(str)), dtype=bool, count=n)
    obj = np.array(values, dtype=object)
    col = np.empty(n, dtype=np.int64)
    col[is_str] = table.ids(obj[is_str].tolist(), int(is_str.sum()))
    try:
        col[~is_str] = obj[~is_str].astype(np.int64)
        return col, is_str
    except OverflowError:                      # an int beyond int64: an id of its own, as a string is
        big = np.fromiter((type(v) is int and not _I64[0] <= v < _I64[1] for v in values), dtype=bool, count=n)
        col[big] = table.ids(obj[big].tolist(), int(big.sum()))
        col[~is_str & ~big] = obj[~is_str & ~big].astype(np.int64)
        return col, is_str | big


def _corr_column(values: list) -> tuple[np.ndarray, np.ndarray]:
    """int64 correlation ids, -1 where absent or not a number (a string of digits is its number, as
    ``int()`` reads it); and whether args named one."""
    n = len(values)
    has = np.fromiter(map(is_not, values, repeat(None)), dtype=bool, count=n)
    if has.all():
        try:
            return np.fromiter(values, dtype=np.int64, count=n), has
        except (TypeError, ValueError, OverflowError):
            pass
    out = np.full(n, -1, dtype=np.int64)
    present = list(compress(values, has))
    try:
        out[has] = np.fromiter(present, dtype=np.int64, count=len(present))
    except (TypeError, ValueError, OverflowError):
        out[has] = [_corr(c) for c in present]
    return out, has


def _corr(c) -> int:
    try:
        v = int(c)
    except (TypeError, ValueError):
        return -1
    return v if _I64[0] <= v < _I64[1] else -1
