"""The values of the expression language (ddpdoctor/expr.py) that are its own: :class:`Missing` (facts
this run does not have), :class:`Vec` (one value per rank or per (rank, step) row), and :class:`ExprError`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class ExprError(ValueError):
    """An expression is malformed or uses something outside the whitelist."""


@dataclass(frozen=True)
class Missing:
    """The value of an expression that needs facts this run does not have."""

    names: frozenset = field(default_factory=frozenset)

    def __bool__(self):
        raise ExprError("a missing value has no truth value")

    def __or__(self, other: Missing) -> Missing:
        return Missing(self.names | other.names)


@dataclass
class Vec:
    """One value per rank or per (rank, step) row, labelled with the rank of each element."""

    values: np.ndarray
    ranks: np.ndarray

    def __len__(self) -> int:
        return int(self.values.size)

    def like(self, values) -> Vec:
        return Vec(np.asarray(values), self.ranks)
