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
EXT_STR = 16      # the external id is an id into ``strings`` (msgscan.py only)


class ArgValues(Protocol):
    """The two args read for a few rows only, kept in the reader's own form until asked for."""

    def in_nelems(self, i: int) -> int | float | str | None:
        """args "In msg nelems" of row ``i``, typed as trace/schema.py types it."""

    def input_dims(self, i: int) -> str:
        """args "Input Dims" of row ``i`` as its JSON text."""


@dataclass
class Columns:
    """String fields are ids into ``strings`` (one id per distinct value). pid, tid and the external
    id are ints, or ids into ``strings`` where ``flags`` says so (a string id, or an int beyond int64)."""

    n: int
    ts: np.ndarray            # float64
    dur: np.ndarray           # float64
    cat: np.ndarray           # int32 ids
    name: np.ndarray          # int32 ids
    coll: np.ndarray          # int32 ids of args "Collective name"; -1: none
    dtype: np.ndarray         # int32 ids of args "dtype"; -1: none
    pid: np.ndarray           # int64
    tid: np.ndarray           # int64
    corr: np.ndarray          # int64 args "correlation"; -1 where absent or not a number
    ext: np.ndarray           # int64 args "External id" (2021: "external id") where flags has HAS_EXT
    flags: np.ndarray         # uint8: PID_STR, TID_STR, HAS_CORR, HAS_EXT, EXT_STR
    has_dims: np.ndarray      # bool: args "Input Dims" is present and not empty
    has_msg: np.ndarray       # bool: args "In msg nelems" is present and not null
    strings: list
    args: ArgValues
