"""The messages of collective records (``record_param_comms``: ``In msg nelems`` and ``dtype``):
their bytes, built the same way by trace/normalize.py from either reader's columns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import classify


@dataclass
class CollMessages:
    """The collective records that carry their message (``record_param_comms`` with ``In msg nelems``
    and ``dtype``): when each was issued, its bytes and its canonical kind (``all_reduce``, …)."""

    start: np.ndarray
    nbytes: np.ndarray
    kind: list[str]
    elem_bytes: np.ndarray  # bytes per element of each message's dtype (2: already 16-bit)

    def __len__(self) -> int:
        return int(self.start.size)


def no_messages() -> CollMessages:
    return CollMessages(np.zeros(0), np.zeros(0), [], np.zeros(0))


# bytes per element of the dtype names collective records carry (c10d's ScalarType names)
DTYPE_BYTES = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "ComplexHalf": 4,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
}


def message_bytes(nelems, dtype) -> float | None:
    """A collective record's message in bytes: ``In msg nelems`` × the size of its ``dtype``."""
    size = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
    try:
        n = float(nelems)
    except (TypeError, ValueError, OverflowError):
        return None
    return n * size if size is not None and 0 <= n < 1e15 else None


def coll_messages(records) -> CollMessages:
    """CollMessages from (start, collective name, ``In msg nelems``, ``dtype``) of the host collective
    records; a record without a name, a size or a known dtype is left out."""
    start, nbytes, kind, elem = [], [], [], []
    for s, collective, nelems, dtype in records:
        if not collective or nelems is None:
            continue
        b = message_bytes(nelems, dtype)
        if b is not None:
            start.append(s)
            nbytes.append(b)
            kind.append(classify.collective_kind(collective, "", None))
            elem.append(DTYPE_BYTES[dtype])
    if not start:
        return no_messages()
    return CollMessages(
        np.asarray(start, dtype=np.float64),
        np.asarray(nbytes, dtype=np.float64),
        kind,
        np.asarray(elem, dtype=np.float64),
    )
