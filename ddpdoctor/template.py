"""Text templates of rules: ``{expr}`` or ``{expr:format_spec}``; ``{{`` and ``}}`` are braces.

Each ``{…}`` is an expression of :mod:`.expr` (so ``{config.dataloader.num_workers}``,
``{pct(wait_share)}`` and ``{wait_share:.0%}`` all work).  A text never shows a stand-in for a
value the run did not record: a template that needs one renders as ``None`` (it cannot be said)
and reports the names, so the engine leaves out the part, drops the fix or says the summary
without it (docs/DESIGN.md, "A text that needs a missing fact is not said").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .expr import Expr, ExprError, Missing, Vec, compile_expr

_FIELD = re.compile(r"\{\{|\}\}|\{([^{}]+)\}")


@dataclass
class Template:
    source: str
    parts: list  # str or (Expr, spec)

    @property
    def names(self) -> frozenset:
        out = set()
        for p in self.parts:
            if not isinstance(p, str):
                out |= p[0].names
        return frozenset(out)

    def placeholders(self) -> str:
        return _placeholders(self)

    def render(self, lookup) -> tuple[str | None, set[str]]:
        """The text, or None when a value it needs was not recorded (with the names of all such values:
        a ``Missing`` without names, ``str(None)``, still makes it unsayable)."""
        out, missing, unsaid = [], set(), False
        for p in self.parts:
            if isinstance(p, str):
                out.append(p)
                continue
            expr, spec = p
            value = expr(lookup)
            if isinstance(value, Missing) or _unrecorded(value):
                missing |= set(value.names) if isinstance(value, Missing) else set(expr.names)
                unsaid = True
                continue
            out.append(format_value(value, spec))
        return (None if unsaid else "".join(out)), missing


def _unrecorded(value) -> bool:
    """None (the log engine's "could not find") and NaN are values the run did not record, not text."""
    if value is None:
        return True
    return isinstance(value, (float, np.floating)) and bool(np.isnan(value))


def placeholder(expr: Expr) -> str:
    """``{default(config.dataloader.num_workers, 0)}`` as ``<num_workers>``: what `rules explain`
    shows in place of the value, so a template reads as text, never as code."""
    import ast

    node = expr.tree.body
    noun = ""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "plural"
        and len(node.args) > 1
    ):
        one = node.args[1]
        many = node.args[2] if len(node.args) > 2 else None  # plural(n, 'batch', 'batches')
        if isinstance(many, ast.Constant) and isinstance(many.value, str):
            noun = f" {many.value}"
        elif isinstance(one, ast.Constant):
            noun = f" {one.value}s"
    names = sorted(expr.names, key=lambda n: expr.source.find(n))
    if not names:
        try:
            return format_value(expr({}))
        except Exception:  # noqa: BLE001 - a constant expression that needs a fact after all
            return "<value>"
    return f"<{names[0].rsplit('.', 1)[-1]}>{noun}"


def _placeholders(t: Template) -> str:
    return "".join(p if isinstance(p, str) else placeholder(p[0]) for p in t.parts)


def _split_spec(body: str) -> tuple[str, str]:
    """'x:.0%' -> ('x', '.0%'); a ':' inside quotes or brackets is not a separator."""
    depth, quote = 0, None
    for i, ch in enumerate(body):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == ":" and depth == 0:
            return body[:i], body[i + 1 :]
    return body, ""


def compile_template(source: str) -> Template:
    if not isinstance(source, str):
        raise ExprError("a template must be a string")
    parts: list = []
    pos = 0
    for m in _FIELD.finditer(source):
        parts.append(source[pos : m.start()])
        tok = m.group(0)
        if tok == "{{":
            parts.append("{")
        elif tok == "}}":
            parts.append("}")
        else:
            body, spec = _split_spec(m.group(1))
            expr: Expr = compile_expr(body)
            if spec:
                try:
                    format(0.5, spec) if any(c in spec for c in "%feEgG") else None
                except ValueError as exc:
                    raise ExprError(f"bad format spec {spec!r} in {{{m.group(1)}}}: {exc}") from None
            parts.append((expr, spec))
        pos = m.end()
    rest = source[pos:]
    if "{" in rest or "}" in rest:
        raise ExprError(f"unbalanced brace in template {source[:60]!r}")
    parts.append(rest)
    return Template(source, [p for p in parts if p != ""])


def format_value(value, spec: str = "") -> str:
    if isinstance(value, Vec):
        value = [float(v) for v in value.values]
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(v, spec) for v in value) if value else "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {format_value(v, spec)}" for k, v in value.items())
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "True" if value else "False"
    if spec:
        try:
            return format(value, spec)
        except (ValueError, TypeError):
            return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


# ------------------------------------------------------------------ variants: text chosen by conditions


@dataclass
class Variant:
    when: Expr | None  # None: always (the last variant of a part, as its "otherwise")
    text: Template


@dataclass
class VariantTemplate:
    """A template written as parts (``[[summary]]``, ``[[fix.change]]``), rendered in order and
    joined as written.  Each part is a list of variants: the first whose ``when`` holds is
    rendered; a variant without ``when`` always holds; when none holds the part adds nothing.
    A part is left out, and the names it needed reported, when the run cannot decide a ``when``
    before one holds (the later variants are written for that ``when`` being false, so none of
    them is safe to say), or when the chosen variant's text needs a value the run did not record.
    A text to say without x is a variant of its own, first: ``when = "default(x, None) == None"``.
    The whole renders as None (it cannot be said) when nothing is left and something was left out."""

    parts: list[list[Variant]]

    @property
    def names(self) -> frozenset:
        out = set()
        for part in self.parts:
            for v in part:
                out |= v.text.names | (v.when.names if v.when is not None else frozenset())
        return frozenset(out)

    @property
    def source(self) -> str:
        lines = []
        for part in self.parts:
            for i, v in enumerate(part):
                if v.when is None and len(part) == 1:
                    lines.append(v.text.source)
                else:
                    head = "otherwise" if v.when is None else ("if " if i == 0 else "else if ") + v.when.source
                    lines.append(f"[{head}] {v.text.source}")
        return "\n".join(lines)

    def placeholders(self) -> str:
        """Each part's text with ``<name>`` placeholders; a part with variants as its alternatives,
        each after the condition that chooses it."""
        out = []
        for part in self.parts:
            if len(part) == 1 and part[0].when is None:
                out.append(part[0].text.placeholders())
                continue
            alts = [
                ("otherwise" if v.when is None else ("if " if i == 0 else "else if ") + v.when.source)
                + ": "
                + v.text.placeholders().strip()
                for i, v in enumerate(part)
            ]
            out.append("\n[" + " | ".join(alts) + "]\n")
        return "".join(out)

    def render(self, lookup) -> tuple[str | None, set[str]]:
        out, missing, left_out = [], set(), False
        for part in self.parts:
            for v in part:
                if v.when is not None:
                    cond = v.when(lookup)
                    if isinstance(cond, Missing):
                        missing |= set(cond.names)
                        left_out = True
                        break
                    if isinstance(cond, Vec):
                        raise ExprError(
                            f"variant condition {v.when.source!r} gives one value per rank; "
                            "wrap it in any(), all(), count(), median() …"
                        )
                    if not cond:
                        continue
                text, m = v.text.render(lookup)
                missing |= m
                if text is None:
                    left_out = True
                else:
                    out.append(text)
                break
        text = "".join(out)
        return (None if left_out and not text.strip() else text), missing
