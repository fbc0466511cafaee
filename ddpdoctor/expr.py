"""A small, safe expression language for rule conditions, evidence and templates.

Expressions use Python syntax but are never passed to ``eval``: they are parsed with
``ast`` and only a whitelist of nodes is evaluated — names (dotted: ``rank.share.dataloader_wait``),
literals, lists, arithmetic, comparisons, ``and``/``or``/``not``, ``x if c else y`` and calls
of the functions in :data:`FUNCTIONS`.  No attribute access on objects, no subscripts of
arbitrary objects, no lambdas, no comprehensions.

Values: numbers, strings, booleans, ``None`` (a recorded "not applicable"), lists, dicts,
and :class:`Vec` — one number per rank (``rank.*``) or per (rank, step) row (``step.*``).
Arithmetic and comparisons on a Vec are element-wise; aggregates (``median``, ``max``, …)
reduce it.  A name that is not known for this run evaluates to :class:`Missing`, which
propagates (three-valued logic: ``False and Missing`` is ``False``), so a rule whose
condition needs evidence the run does not have *abstains* instead of guessing.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass, field

import numpy as np

from .text import PHASE_WORDS


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


def _missing_in(*vals) -> Missing | None:
    m = [v for v in vals if isinstance(v, Missing)]
    if not m:
        return None
    out = m[0]
    for x in m[1:]:
        out = out | x
    return out


def _num(x):
    if isinstance(x, Vec):
        return x.values
    if x is None:
        raise ExprError("None used in arithmetic")
    return x


def _elementwise(op, a, b):
    miss = _missing_in(a, b)
    if miss is not None:
        return miss
    if isinstance(a, Vec) or isinstance(b, Vec):
        v = a if isinstance(a, Vec) else b
        if isinstance(a, Vec) and isinstance(b, Vec) and len(a) != len(b):
            raise ExprError("per-rank and per-step values cannot be combined element-wise")
        with np.errstate(divide="ignore", invalid="ignore"):
            return v.like(op(_num(a), _num(b)))
    if op in _ARITH.values() and (a is None or b is None):
        raise ExprError("None used in arithmetic")
    if op is operator.truediv and b == 0:
        return math.inf if a > 0 else (0.0 if a == 0 else -math.inf)
    return op(a, b)


_ARITH = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMP = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


def _compare(op, a, b):
    miss = _missing_in(a, b)
    if miss is not None:
        return miss
    if isinstance(op, (ast.In, ast.NotIn)):
        if isinstance(b, Missing):
            return b
        inside = a in (b if not isinstance(b, Vec) else list(b.values))
        return inside if isinstance(op, ast.In) else not inside
    if isinstance(op, (ast.Is, ast.IsNot)):
        raise ExprError("use == and != instead of 'is'")
    f = _CMP[type(op)]
    if isinstance(a, Vec) or isinstance(b, Vec):
        return _elementwise(f, a, b)
    if (a is None or b is None) and f not in (operator.eq, operator.ne):
        return False
    return f(a, b)


def _truth(v):
    """True, False, a boolean Vec, or Missing."""
    if isinstance(v, (Missing, Vec)):
        return v if not isinstance(v, Vec) else v.like(v.values.astype(bool))
    return bool(v)


def _logic(vals, is_and: bool):
    """``and`` / ``or`` with three-valued logic: a deciding value (False for and, True for or)
    wins over Missing; per-rank values combine element-wise."""
    identity, combine = (True, np.logical_and) if is_and else (False, np.logical_or)
    out, miss = identity, None
    for v in vals:
        t = _truth(v)
        if isinstance(t, Missing):
            miss = t if miss is None else miss | t
        elif isinstance(t, Vec):
            out = out.like(combine(out.values, t.values)) if isinstance(out, Vec) else t
        elif bool(t) != is_and:
            return not is_and
    return miss if miss is not None else out


def _and(vals):
    return _logic(vals, True)


def _or(vals):
    return _logic(vals, False)


# --- functions -----------------------------------------------------------------------


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


def _speedup(share):
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
    "speedup": _speedup,
    "pct": _pct,
    "human_bytes": _human_bytes,
    "human_us": _human_us,
    "plural": _plural,
    "phase": _phase,
}
# functions that receive Missing arguments themselves instead of propagating them
LAZY = {"known", "default"}
ALL_FUNCTIONS = set(FUNCTIONS) | LAZY


# --- parsing and evaluation ----------------------------------------------------------------


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` as a string, or None when the node is not a plain dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


_ALLOWED = (
    ast.Expression,
    ast.BoolOp,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.Call,
    ast.Name,
    ast.Attribute,
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.IfExp,
    ast.And,
    ast.Or,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.Load,
    *_ARITH,
    *_CMP,
    ast.In,
    ast.NotIn,
)
_CONSTANTS = {"true": True, "false": False, "none": None, "null": None, "True": True, "False": False, "None": None}


@dataclass
class Expr:
    source: str
    tree: ast.Expression
    names: frozenset  # dotted names the expression reads

    def __call__(self, lookup) -> object:
        return _eval(self.tree.body, lookup)


def compile_expr(source: str) -> Expr:
    """Parse and check an expression; raises ExprError naming what is not allowed."""
    if not isinstance(source, str) or not source.strip():
        raise ExprError("empty expression")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"syntax error in {source!r}: {exc.msg}") from None
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise ExprError(f"{type(node).__name__} is not allowed in {source!r}")
        if isinstance(node, ast.Call):
            fname = node.func.id if isinstance(node.func, ast.Name) else None
            if fname not in ALL_FUNCTIONS:
                raise ExprError(
                    f"unknown function {ast.unparse(node.func)!r} in {source!r} "
                    f"(allowed: {', '.join(sorted(ALL_FUNCTIONS))})"
                )
            if node.keywords:
                raise ExprError(f"keyword arguments are not allowed in {source!r}")
        if isinstance(node, ast.Attribute):
            if dotted(node) is None:
                raise ExprError(f"attribute access on a value is not allowed in {source!r}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool, type(None))):
            raise ExprError(f"constant {node.value!r} is not allowed")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)):
            d = dotted(node)
            if d and d not in _CONSTANTS and d not in ALL_FUNCTIONS:
                names.add(d)
    # keep only maximal dotted names (a.b.c, not also a.b and a)
    names = {n for n in names if not any(o != n and o.startswith(n + ".") for o in names)}
    return Expr(source, tree, frozenset(names))


def _eval(node, lookup):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = dotted(node)
        if name in _CONSTANTS:
            return _CONSTANTS[name]
        return lookup(name)
    if isinstance(node, (ast.List, ast.Tuple)):
        vals = [_eval(e, lookup) for e in node.elts]
        miss = _missing_in(*vals)
        return miss if miss is not None else vals
    if isinstance(node, ast.BoolOp):
        vals = (_eval(v, lookup) for v in node.values)
        return _and(vals) if isinstance(node.op, ast.And) else _or(vals)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, lookup)
        if isinstance(v, Missing):
            return v
        if isinstance(node.op, ast.Not):
            return v.like(~v.values.astype(bool)) if isinstance(v, Vec) else not v
        if isinstance(node.op, ast.USub):
            return v.like(-v.values) if isinstance(v, Vec) else -v
        return v
    if isinstance(node, ast.BinOp):
        return _elementwise(_ARITH[type(node.op)], _eval(node.left, lookup), _eval(node.right, lookup))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, lookup)
        results = []
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, lookup)
            results.append(_compare(op, left, right))
            left = right
        return results[0] if len(results) == 1 else _and(results)
    if isinstance(node, ast.IfExp):
        cond = _truth(_eval(node.test, lookup))
        if isinstance(cond, Missing):
            return cond
        if isinstance(cond, Vec):
            raise ExprError("'x if cond else y' needs a single condition, not per-rank values")
        return _eval(node.body if cond else node.orelse, lookup)
    if isinstance(node, ast.Call):
        fname = node.func.id
        if fname == "known":
            return all(not isinstance(_eval(a, lookup), Missing) for a in node.args)
        if fname == "default":  # the first argument that is known and not None
            for a in node.args:
                v = _eval(a, lookup)
                if not isinstance(v, Missing) and v is not None:
                    return v
                if v is None and a is node.args[-1]:
                    return None
            return Missing(frozenset())
        args = [_eval(a, lookup) for a in node.args]
        miss = _missing_in(*args)
        if miss is not None:
            return miss
        try:
            result = FUNCTIONS[fname](*args)
            if isinstance(result, Missing):  # e.g. median() of values the trace cannot show
                names = {dotted(n) for a in node.args for n in ast.walk(a) if isinstance(n, (ast.Name, ast.Attribute))}
                names = {n for n in names if n and n not in ALL_FUNCTIONS and n not in _CONSTANTS}
                names = {n for n in names if not any(o != n and o.startswith(n + ".") for o in names)}
                return Missing(frozenset(names) or result.names)
            return result
        except ExprError:
            raise
        except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
            raise ExprError(f"{fname}(): {exc}") from None
    raise ExprError(f"{type(node).__name__} is not allowed")
