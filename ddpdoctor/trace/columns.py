"""The columns both trace readers produce and trace/normalize.py reads: one row per complete event
("ph": "X"), in file order, every field a numpy column and every string an id.

Readers: trace/fastscan.py (the compiled reader, _kscan.c, straight from the file's bytes) and
trace/msgscan.py (msgspec's typed decode, for files the compiled reader does not take).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

# flags per row (the compiled reader's values: F_PID_STR ... in _kscan_lex.h)
PID_STR, TID_STR, HAS_CORR, HAS_EXT = 1, 2, 4, 8


class ArgColumns(Protocol):
    """The events' args, read for the rows the normaliser asks about (most rows need none of them):
    ``rows`` is an int array of row numbers."""

    def corr(self, rows: np.ndarray) -> np.ndarray:
        """int64 args "correlation"; -1 where absent or not a number."""

    def ext(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(present, keys) of args "External id" (2021 traces: "external id"): keys is int64, or an
        object array of the values (an int beyond int64, a string) when not every id is an int64."""

    def coll(self, rows: np.ndarray) -> np.ndarray:
        """args "Collective name": an object array, None where absent."""

    def dtype(self, rows: np.ndarray) -> np.ndarray:
        """args "dtype": an object array, None where absent."""

    def has_msg(self, rows: np.ndarray) -> np.ndarray:
        """bool: args "In msg nelems" is present and not null."""

    def has_dims(self, rows: np.ndarray) -> np.ndarray:
        """bool: args "Input Dims" is present and not empty."""

    def in_nelems(self, i: int) -> int | float | str | None:
        """args "In msg nelems" of row ``i``, typed as trace/schema.py types it."""

    def input_dims(self, i: int) -> str:
        """args "Input Dims" of row ``i`` as its JSON text."""


@dataclass
class Columns:
    """String fields are ids into ``strings`` (one id per distinct value); pid and tid are ints, or
    ids into ``strings`` where ``flags`` says so (a string id, or an int beyond int64)."""

    n: int
    ts: np.ndarray  # float64
    dur: np.ndarray  # float64
    cat: np.ndarray  # int32 ids
    name: np.ndarray  # int32 ids
    pid: np.ndarray  # int64
    tid: np.ndarray  # int64
    flags: np.ndarray  # uint8: PID_STR, TID_STR (the compiled reader sets HAS_CORR, HAS_EXT too)
    strings: list
    args: ArgColumns
