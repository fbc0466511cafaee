"""`ddpdoctor rules explain ID`: a rule in plain text."""

from __future__ import annotations

import textwrap

from .model import Rule


def explain(rule: Rule, overrides: dict | None = None) -> str:
    out = [f"{rule.id}  {rule.name}  ({rule.category}, severity {rule.severity})",
           f"{rule.title}", ""]
    out.append("Detects when:  " + rule.when.source)
    if rule.cost is not None:
        out.append("Cost (share of step time it removes):  " + rule.cost.source)
    if rule.log_patterns:
        out.append("Log patterns:  " + "  |  ".join(rule.log_patterns))
    if rule.why:
        out += ["", "Why it matters:", textwrap.indent(textwrap.fill(" ".join(rule.why.split()), 88), "  ")]
    if rule.params:
        out += ["", "Params (override with --set " + rule.id + ".NAME=VALUE or [tool.ddpdoctor.params]):"]
        for p in rule.params.values():
            now = f"  (set to {overrides[p.name]})" if overrides and p.name in overrides else ""
            out.append(f"  {p.name} = {p.default!r}{now}" + (f" — {p.help}" if p.help else ""))
    if rule.evidence:
        out += ["", "Evidence:"] + [f"  {k} = {e.source}" for k, e in rule.evidence.items()]
    if rule.fixes:
        out += ["", "Fixes (<name>: filled in with the run's own value when the rule fires):"]
        for fx in rule.fixes:
            cond = f"   [if {fx.applies_if.source}]" if fx.applies_if is not None else ""
            out.append(f"  - {fx.title.placeholders()}{cond}")
            out += [f"      {line}".rstrip() for line in fx.change.placeholders().strip("\n").splitlines()]
    if rule.references:
        out += ["", "References:"] + [f"  {r}" for r in rule.references]
    out += ["", f"Defined in {rule.path} ({rule.origin}); {len(rule.tests)} stored test case{'' if len(rule.tests) == 1 else 's'}."]
    return "\n".join(out)
