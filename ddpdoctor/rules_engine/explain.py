"""`ddpdoctor rules explain ID`: a rule in plain text, wrapped at the terminal's width."""

from __future__ import annotations

import textwrap

from ..text import WIDTH, block, wrap
from .model import Rule


def _code(text: str, width: int, indent: str) -> list[str]:
    """An expression or fact name wrapped at spaces (never inside a word), each line indented."""
    return textwrap.wrap(
        " ".join(text.split()),
        width=max(20, width),
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


def _shown_path(path) -> str:
    """A built-in rule as rules/<category>/<file> (the checkout's own path can be long); another rule's
    path relative to the current folder when it lies under it."""
    from pathlib import Path

    from ..resources import rules_dir

    p = Path(path)
    for root, shown in ((rules_dir(), Path("rules")), (Path.cwd(), Path("."))):
        try:
            return str(shown / p.resolve().relative_to(root.resolve()))
        except (ValueError, OSError):
            continue
    return str(p)


def _fit(lines: list[str], width: int) -> list[str]:
    """Code lines wider than the screen continue on the next line, indented under themselves (a
    comment stays a comment); `rules explain` shows templates with <placeholders>, never pasted as is."""
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        body = line.lstrip()
        lead = line[: len(line) - len(body)]
        more = lead + ("# " if body.startswith("# ") else "    ")
        out += textwrap.wrap(
            body,
            width=max(20, width),
            initial_indent=lead,
            subsequent_indent=more,
            break_long_words=False,
            break_on_hyphens=False,
        ) or [line]
    return out


def explain(rule: Rule, overrides: dict | None = None, width: int = WIDTH) -> str:
    out = wrap(f"{rule.id}  {rule.name}  ({rule.category}, severity {rule.severity})", width, "", "  ")
    out += wrap(rule.title, width) + [""]
    out += ["Detects when:"] + _code(rule.when.source, width, "  ")
    if rule.cost is not None:
        out += ["Cost (share of step time it removes):"] + _code(rule.cost.source, width, "  ")
    if rule.log_patterns:
        out += ["Log patterns:"] + [ln for p in rule.log_patterns for ln in _code(p, width, "  ")]
    if rule.why:
        out += ["", "Why it matters:"] + wrap(rule.why, width, "  ")
    if rule.params:
        out += [""] + wrap(f"Params (override with --set {rule.id}.NAME=VALUE or [tool.ddpdoctor.params]):", width)
        for p in rule.params.values():
            now = f"  (set to {overrides[p.name]})" if overrides and p.name in overrides else ""
            out += wrap(f"{p.name} = {p.default!r}{now}" + (f" — {p.help}" if p.help else ""), width, "  ", "    ")
    if rule.evidence:
        out += ["", "Evidence:"] + [
            ln for k, e in rule.evidence.items() for ln in _code(f"{k} = {e.source}", width, "  ")
        ]
    if rule.fixes:
        out += [""] + wrap("Fixes (<name>: filled in with the run's own value when the rule fires):", width)
        for fx in rule.fixes:
            out += wrap(fx.title.placeholders(), width, "  - ", "    ")
            if fx.applies_if is not None:
                out += _code(f"[if {fx.applies_if.source}]", width, "      ")
            out += [ln.rstrip() for ln in block(fx.change.placeholders(), width, indent="      ")]
    if rule.references:
        out += ["", "References:"] + [f"  {r}" for r in rule.references]
    tests = f"{len(rule.tests)} stored test case{'' if len(rule.tests) == 1 else 's'}"
    out += [""] + wrap(f"Defined in {_shown_path(rule.path)} ({rule.origin}); {tests}.", width)
    return "\n".join(_fit(out, width))
