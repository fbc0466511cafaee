"""Evaluate rules against a run's facts: each rule fires, stays quiet or abstains.

The facts are one flat dict of dotted names (see ddpdoctor/rules_engine/facts.py and
docs/RULES.md).  Inside a rule, a bare name is looked up first among the rule's evidence
(computed in file order), then its params, then ``match.*`` (its log patterns), then the
facts, then ``metrics.*`` (the thresholds of rules/metrics.toml, after ``--set
metrics.…`` and config overrides).  A name found nowhere is Missing: a condition that needs it makes the rule abstain
and the report says which facts were missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..expr import ExprError, Missing, Vec
from ..expr_functions import speedup
from ..resources import metric_defaults
from .edge import Edge, measure
from .frameworks import phrase, phrased_change
from .model import Rule, metric_value, order_class


@dataclass
class FixOut:
    title: str
    change: str
    kind: str
    not_recorded: list[str] = field(default_factory=list)  # values the fix needed but the run did not record
    knob: str | None = None  # the setting the fix changes (see model.Fix)
    value: str | None = None  # its new value, rendered
    framework: str | None = None  # set when `change` is phrased in that framework's settings (frameworks.py)


@dataclass
class Finding:
    rule: str
    name: str
    category: str
    severity: str
    title: str
    summary: str
    ranks: list[int]
    evidence: dict
    fixes: list[FixOut]
    why: str = ""
    references: list[str] = field(default_factory=list)
    cost: float | None = None  # share of step time (0..1)
    expected_speedup: float | None = None  # upper bound if the cost were removed
    speedup_is_lower_bound: bool = False  # the rule's cost is a lower bound (cost_is = "lower_bound")
    agreement: float | None = None
    confidence: float | None = None
    not_recorded: list[str] = field(default_factory=list)
    label: str = ""
    order: str = "cost"  # its class in rules/metrics.toml [order] (model.order_class)
    edge: Edge | None = None  # how far from the threshold that made it fire, in step-to-step noise (edge.py)


@dataclass
class Outcome:
    rule: str
    status: str  # "fire", "quiet", "abstain" or "error"
    finding: Finding | None = None
    missing: list[str] = field(default_factory=list)
    error: str | None = None


def plain(v):
    """A JSON-able version of an evaluated value."""
    if isinstance(v, Vec):
        return (
            {int(r): plain(x) for r, x in zip(v.ranks, v.values)}
            if len(set(v.ranks.tolist())) == len(v)
            else [plain(x) for x in v.values]
        )
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        v = v.item()
    if isinstance(v, float):
        return None if np.isnan(v) else round(v, 6)
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    return v


class _Lookup:
    def __init__(self, facts: dict, params: dict, match: dict | None, thresholds: dict | None):
        self.values: dict = {}
        self.thresholds = thresholds
        self.params = params
        self.facts = facts
        self.match = match or {}

    def __call__(self, name: str):
        if name in self.values:
            return self.values[name]
        if name in self.params:
            return self.params[name]
        if name.startswith("match.") and name[6:] in self.match:
            return self.match[name[6:]]
        if name in self.facts:
            return self.facts[name]
        if name.startswith("metrics."):
            try:
                return metric_value(name, self.thresholds)
            except (KeyError, TypeError):
                pass
        return Missing(frozenset({name}))


def drop_yielded(findings: list[Finding], rules: dict[str, Rule]) -> list[Finding]:
    """The findings without those whose rule ``yields_to`` a rule that fired clear of its line: that finding
    already says the mechanism and leads with its fix (accumulation without no_sync() is the exposed-communication
    rule's first fix when that rule fires); at its line, that rule decides nothing and the mechanism stands alone."""
    clear = {f.rule for f in findings if f.edge is None or not f.edge.at_line}
    return [f for f in findings if not (f.rule in rules and clear.intersection(rules[f.rule].yields_to))]


def _holds(expr, look, what: str) -> bool:
    """An optional fix condition that holds (not when absent, false or not recorded)."""
    if expr is None:
        return False
    v = _single(expr(look), what)
    return not isinstance(v, Missing) and bool(v)


def _single(v, what: str):
    if isinstance(v, Vec):
        raise ExprError(f"{what} gives one value per rank; wrap it in any(), all(), count(), median() …")
    return v


def evaluate(
    rule: Rule, facts: dict, params: dict | None = None, log_search=None, thresholds: dict | None = None
) -> Outcome:
    """Evaluate one rule.  ``log_search(patterns) -> dict`` serves rules with log patterns; ``thresholds``:
    the analysis's rules/metrics.toml that ``metrics.*`` names read (default: as shipped)."""
    match = None
    if rule.log_patterns:
        if log_search is None:
            return Outcome(rule.id, "abstain", missing=["logs"])
        match = log_search(rule.log_patterns)
    look = _Lookup(facts, rule.param_values(params), match, thresholds)
    try:
        for name, e in rule.evidence.items():
            look.values[name] = e(look)
        cond = _single(rule.when(look), "the condition")
        if isinstance(cond, Missing):
            return Outcome(rule.id, "abstain", missing=sorted(cond.names))
        if not cond:
            return Outcome(rule.id, "quiet")
        return Outcome(rule.id, "fire", finding=_finding(rule, look))
    except ExprError as exc:
        return Outcome(rule.id, "error", error=f"rule {rule.id} ({rule.path}): {exc}")
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        return Outcome(rule.id, "error", error=f"rule {rule.id} ({rule.path}): {type(exc).__name__}: {exc}")


def _number(v) -> float | None:
    if isinstance(v, Missing) or v is None or isinstance(v, (list, dict, str, Vec)):
        return None
    f = float(v)
    return None if np.isnan(f) else f


def _finding(rule: Rule, look: _Lookup) -> Finding:
    summary, missing = rule.summary.render(look)
    if not (summary or "").strip():  # nothing of it can be said without what the run did not record
        summary = f"{rule.title}."
    ranks: list[int] = []
    if rule.ranks is not None:
        r = rule.ranks(look)
        if isinstance(r, Vec):
            r = [int(x) for x in r.ranks]
        if isinstance(r, (list, tuple)):
            ranks = sorted({int(x) for x in r if x is not None and not isinstance(x, Missing)})
        elif isinstance(r, (int, float)) and not isinstance(r, bool):
            ranks = [int(r)]
    cost = _number(rule.cost(look)) if rule.cost is not None else None
    if cost is not None:
        cost = min(max(cost, 0.0), 1.0)
    agreement = _number(rule.agreement(look)) if rule.agreement is not None else None
    confidence = _number(rule.confidence(look)) if rule.confidence is not None else None
    edge = None
    if rule.edge_value is not None and rule.edge_threshold is not None:
        edge_noise = (look.thresholds or metric_defaults())["verdict"]["edge_noise"]
        edge = measure(rule.edge_value(look), rule.edge_threshold(look), edge_noise)
    fixes, place = [], []
    for fx in rule.fixes:
        assumed: set[str] = set()
        if fx.applies_if is not None:
            ok = _single(fx.applies_if(look), "applies_if")
            if isinstance(ok, Missing):
                assumed |= set(ok.names)  # cannot tell: keep the fix and say what was not known
            elif not ok:
                continue
        title, m1 = fx.title.render(look)
        change, m2 = fx.change.render(look)
        value, m3 = fx.value.render(look) if fx.value is not None else ("", set())
        if title is None or change is None or value is None:
            missing |= m1 | m2 | m3  # a fix that needs a value the run did not record is not offered
            continue
        value = value.strip() if fx.value is not None else None
        place.append(
            0 if _holds(fx.leads_if, look, "leads_if") else 2 if _holds(fx.trails_if, look, "trails_if") else 1
        )
        change = change.strip("\n")
        in_framework = phrase(look("run.framework"), fx.knob, value)
        if in_framework is not None:
            change = phrased_change(in_framework, change)
        fixes.append(
            FixOut(
                title.strip(),
                change,
                fx.kind,
                sorted(assumed | m1 | m2 | m3),
                knob=fx.knob,
                value=value,
                framework=in_framework.framework if in_framework else None,
            )
        )
    # the fix the evidence selects first (`leads_if`), the others as written (sorted() is stable)
    fixes = [fx for _p, fx in sorted(zip(place, fixes), key=lambda pf: pf[0])]
    evidence = {k: plain(v) for k, v in look.values.items() if not isinstance(v, Missing)}
    return Finding(
        rule=rule.id,
        name=rule.name,
        category=rule.category,
        severity=rule.severity,
        title=rule.title,
        summary=re.sub(r"\s+", " ", summary or "").strip(),
        ranks=ranks,
        evidence=evidence,
        fixes=fixes,
        why=rule.why,
        references=rule.references,
        cost=cost,
        expected_speedup=speedup(cost) if cost is not None else None,
        speedup_is_lower_bound=rule.cost_is == "lower_bound",
        agreement=agreement,
        confidence=confidence,
        not_recorded=sorted(missing),
        label=rule.label or f"{rule.category}-bound",
        order=order_class(rule.order, rule.category, rule.severity),
        edge=edge,
    )
