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
from dataclasses import dataclass

import numpy as np

from .expr_functions import ALL_FUNCTIONS, FUNCTIONS, LAZY  # noqa: F401  (LAZY: re-exported)
from .expr_values import ExprError, Missing, Vec


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
