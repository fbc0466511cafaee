"""The msgspec reader: a trace decoded into trace/schema.py's structs, as :class:`~.columns.Columns`
(the files the compiled reader does not take: not built, irregular JSON, a bare event list, ...).

Each column is one C-level pass over the event list (``map`` with ``attrgetter`` and
``dict.__getitem__``, ``numpy.fromiter``), so no Python code runs per event except where a field
has an odd type (a string or huge id), which takes a slower exact path.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_, itemgetter
from typing import cast

import numpy as np

from .columns import PID_STR, TID_STR, Columns
from .schema import Args, Trace

PH, CAT, NAME, PID, TID, TS, DUR, ARGS = map(attrgetter, ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args"))
CORR, EXT, EXT_2021, COLL, DTYPE, NELEMS, DIMS = map(
    attrgetter, ("correlation", "external_id", "external_id_2021", "collective", "dtype", "in_nelems", "input_dims")
)
_NO_ARGS = Args()
_I64 = (-(1 << 63), 1 << 63)


class _Table(dict):
    """Distinct values -> ids (in first-seen order): ``map(table.__getitem__, values)`` runs in C and
    calls back into Python only for a value not seen before; None is -1."""

    def __init__(self):
        super().__init__({None: -1})
        self.distinct: list = []  # the values in id order (not `values`: that is dict's own method)

    def __missing__(self, key):
        v = self[key] = len(self.distinct)
        self.distinct.append(key)
        return v

    def ids(self, values, n: int) -> np.ndarray:
        return np.fromiter(map(self.__getitem__, values), dtype=np.int32, count=n)


@dataclass
class StructArgs:
    """:class:`~.columns.ArgColumns` read from the decoded structs, for the rows asked about only."""

    args: list[Args | None]

    def _take(self, rows: np.ndarray) -> list[Args]:
        if not len(rows):
            return []
        got = [self.args[int(rows[0])]] if len(rows) == 1 else list(itemgetter(*rows.tolist())(self.args))
        return [_NO_ARGS if a is None else a for a in got] if None in got else cast("list[Args]", got)

    def corr(self, rows: np.ndarray) -> np.ndarray:
        return _corr_column(list(map(CORR, self._take(rows))))

    def ext(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        args = self._take(rows)
        values = list(map(EXT, args))
        if None in values:  # 2021 traces spell it "external id"
            values = [a if a is not None else b for a, b in zip(values, map(EXT_2021, args))]
        present = ~_is_none(values)
        if set(map(type, values)) <= {int}:
            try:
                return present, np.fromiter(values, dtype=np.int64, count=len(values))
            except OverflowError:
                pass
        keys = np.empty(len(values), dtype=object)
        keys[:] = values
        return present, keys

    def coll(self, rows: np.ndarray) -> np.ndarray:
        return _objects(list(map(COLL, self._take(rows))))

    def dtype(self, rows: np.ndarray) -> np.ndarray:
        return _objects(list(map(DTYPE, self._take(rows))))

    def has_msg(self, rows: np.ndarray) -> np.ndarray:
        return ~_is_none(list(map(NELEMS, self._take(rows))))

    def has_dims(self, rows: np.ndarray) -> np.ndarray:
        args = self._take(rows)
        return np.fromiter(map(bool, map(DIMS, args)), dtype=bool, count=len(args))

    def in_nelems(self, i: int) -> int | float | str | None:
        a = self.args[i]
        return a.in_nelems if a is not None else None

    def input_dims(self, i: int) -> str:
        a = self.args[i]
        return bytes(a.input_dims).decode("utf-8", "replace") if a is not None else ""


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
    flags = (pid_obj * PID_STR + tid_obj * TID_STR).astype(np.uint8)
    return Columns(
        n=n,
        ts=ts,
        dur=dur,
        cat=cat,
        name=name,
        pid=pid,
        tid=tid,
        flags=flags,
        strings=table.distinct,
        args=StructArgs(list(map(ARGS, evs))),
    )


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _is_none(values: list) -> np.ndarray:
    return np.fromiter(map(is_, values, repeat(None)), dtype=bool, count=len(values))


def _id_column(values: list, table: _Table) -> tuple[np.ndarray, np.ndarray]:
    """An int-or-string id column: (int64 values, bool "is an id into the table"); strings and ints
    beyond int64 go into the table."""
    n = len(values)
    if set(map(type, values)) <= {int}:  # numpy would read a string of digits as its number
        try:
            return np.fromiter(values, dtype=np.int64, count=n), np.zeros(n, dtype=bool)
        except OverflowError:
            pass
    is_str = np.fromiter(map(isinstance, values, repeat(str)), dtype=bool, count=n)
    ids = list(values)
    for i in np.flatnonzero(is_str).tolist():
        ids[i] = table[values[i]]
    try:
        return np.fromiter(ids, dtype=np.int64, count=n), is_str
    except OverflowError:  # an int beyond int64: an id of its own, as a string is
        big = np.fromiter((type(v) is int and not _I64[0] <= v < _I64[1] for v in values), dtype=bool, count=n)
        for i in np.flatnonzero(big).tolist():
            ids[i] = table[values[i]]
        return np.fromiter(ids, dtype=np.int64, count=n), is_str | big


def _corr_column(values: list) -> np.ndarray:
    """int64 correlation ids, -1 where absent or not a number (a string of digits is its number, as
    ``int()`` reads it)."""
    n = len(values)
    has = ~_is_none(values)
    if has.all():
        try:
            return np.fromiter(values, dtype=np.int64, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
    out = np.full(n, -1, dtype=np.int64)
    present = list(compress(values, has))
    try:
        out[has] = np.fromiter(present, dtype=np.int64, count=len(present))
    except (TypeError, ValueError, OverflowError):
        out[has] = [_corr(c) for c in present]
    return out


def _corr(c) -> int:
    try:
        v = int(c)
    except (TypeError, ValueError):
        return -1
    return v if _I64[0] <= v < _I64[1] else -1
