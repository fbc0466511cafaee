"""The built-in functions of the expression language (ddpdoctor/expr.py): aggregates over per-rank
values (``median``, ``max``, ``ranks_where``, …), arithmetic helpers and the formatters templates use
(``pct``, ``human_bytes``, ``plural``, …), as :data:`FUNCTIONS`, the name → callable table."""

from __future__ import annotations

import math

import numpy as np

from .expr_values import ExprError, Missing, Vec
from .text import PHASE_WORDS


def _arr(x) -> np.ndarray:
    if isinstance(x, Vec):
        v = x.values.astype(float)
        return v[~np.isnan(v)]
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (list, tuple)):
        return np.asarray([float(v) for v in x if v is not None], dtype=float)
    return np.asarray([float(x)])


def _reduce(f):
    def g(*args):
        if len(args) > 1:  # max(a, b): scalars
            vals = [a for a in args]
            return f(np.asarray([float(v) for v in vals]))
        a = _arr(args[0])
        if a.size == 0:
            return Missing(frozenset({"(no values)"}))
        return float(f(a))

    return g


def _argpick(pick):
    def g(x):
        if not isinstance(x, Vec) or x.values.size == 0:
            raise ExprError("argmax/argmin need per-rank values")
        v = x.values.astype(float)
        if np.all(np.isnan(v)):
            return Missing(frozenset({"(no values)"}))
        return int(x.ranks[pick(np.where(np.isnan(v), -np.inf if pick is np.argmax else np.inf, v))])

    return g


def _ranks_where(mask):
    if not isinstance(mask, Vec):
        raise ExprError("ranks_where needs a per-rank condition such as rank.share.x > 0.1")
    return sorted({int(r) for r, m in zip(mask.ranks, mask.values) if m})


def _count(x):
    if isinstance(x, Vec):
        return int(np.count_nonzero(x.values))
    if isinstance(x, (list, tuple, dict)):
        return len(x)
    return int(bool(x))


def _frac(x):
    if isinstance(x, Vec):
        return float(np.count_nonzero(x.values)) / len(x) if len(x) else 0.0
    return float(bool(x))


def _join(x, sep=", "):
    if isinstance(x, Vec):
        x = list(x.values)
    if isinstance(x, dict):
        x = [f"{k}: {v}" for k, v in x.items()]
    if isinstance(x, (list, tuple)):
        return sep.join(str(v) for v in x)
    return "none" if x is None else str(x)  # as a template shows None: never the word "None"


def speedup(share):
    """Upper bound on the speed-up if a cost of this share of the step were removed."""
    share = min(max(float(share), 0.0), 0.999)
    return 1.0 / (1.0 - share)


def _human_bytes(n):
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"


def _human_us(us):
    us = float(us)
    if abs(us) >= 1e6:
        return f"{us / 1e6:.2f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.0f} µs"


def _pct(x, digits=0):
    return f"{float(x) * 100:.{int(digits)}f} %"


def _pow2(x):
    """The nearest power of two (for bucket sizes and worker counts)."""
    x = float(x)
    return 1 if x <= 1 else int(2 ** round(math.log2(x)))


def _plural(n, one, many=None):
    """``2 ranks``, ``1 rank``: a count with its noun, never ``rank(s)``."""
    n = float(n)
    shown = f"{n:.0f}" if n == int(n) else f"{n:.1f}"
    return f"{shown} {one if n == 1 else (many or one + 's')}"


def _phase(column):
    """A step-table column in plain words (``other`` → ``work outside any traced operator``)."""
    return PHASE_WORDS.get(str(column), str(column).replace("_", " "))


FUNCTIONS = {
    "median": _reduce(np.median),
    "mean": _reduce(np.mean),
    "max": _reduce(np.max),
    "min": _reduce(np.min),
    "sum": _reduce(np.sum),
    "count": _count,
    "frac": _frac,
    "len": lambda x: len(x) if not isinstance(x, Vec) else len(x),
    "any": lambda x: (
        bool(np.any(x.values)) if isinstance(x, Vec) else any(x) if isinstance(x, (list, tuple)) else bool(x)
    ),
    "all": lambda x: (
        bool(np.all(x.values)) if isinstance(x, Vec) else all(x) if isinstance(x, (list, tuple)) else bool(x)
    ),
    "argmax": _argpick(np.argmax),
    "argmin": _argpick(np.argmin),
    "ranks_where": _ranks_where,
    "abs": lambda x: abs(x) if not isinstance(x, Vec) else x.like(np.abs(x.values)),
    "round": lambda x, n=0: round(float(x), int(n)) if n else int(round(float(x))),
    "ceil": lambda x: int(math.ceil(float(x))),
    "floor": lambda x: int(math.floor(float(x))),
    "clamp": lambda x, lo, hi: min(max(x, lo), hi),
    "log2": lambda x: math.log2(float(x)),
    "pow2": _pow2,
    "int": lambda x: int(x),
    "float": lambda x: float(x),
    "str": lambda x: Missing(frozenset()) if x is None else str(x),
    "join": _join,
    "speedup": speedup,
    "pct": _pct,
    "human_bytes": _human_bytes,
    "human_us": _human_us,
    "plural": _plural,
    "phase": _phase,
}
# functions that receive Missing arguments themselves instead of propagating them
LAZY = {"known", "default"}
ALL_FUNCTIONS = set(FUNCTIONS) | LAZY
