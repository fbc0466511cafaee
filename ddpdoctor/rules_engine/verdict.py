"""From rule outcomes to a diagnosis: failures first, then one verdict, then the rest.

* The verdict is the fired performance finding (dataloader, communication, imbalance)
  with the biggest cost — the share of step time that fixing it could remove.  Its
  expected speed-up is the upper bound 1 / (1 − cost).
* Confidence = ½·margin + ½·agreement, where margin = (cost − runner-up cost) / cost and
  agreement is the rule's own share of ranks/steps that show the same cost (0.5 when
  the rule gives none).  A rule may state its own confidence instead (compute-bound does).
* When no avoidable cost passes its threshold, the compute-bound rule speaks (with the
  GPU utilization) rather than inventing a problem.
* A category whose rules all abstained is listed with the facts that were missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..resources import metric_params
from .engine import Finding, Outcome, evaluate
from .model import VERDICT_CATEGORIES
from .registry import RuleSet

SEVERITY_ORDER = {"critical": 0, "high": 1, "medium": 2, "low": 3, "info": 4}
FIRST = ("failure", "network")


@dataclass
class Verdict:
    bottleneck: str | None            # dataloader | communication | compute | imbalance | None
    confidence: float | None
    confidence_label: str | None      # high | medium | low
    expected_speedup: float | None
    summary: str
    rule: str | None = None
    failed: bool = False              # a failure finding was made (it comes first in every output)
    label: str | None = None          # e.g. "dataloader-bound", "host-bound (the GPU waits for the CPU)"


@dataclass
class Diagnosis:
    verdict: Verdict
    findings: list[Finding]
    abstained: list[dict] = field(default_factory=list)    # {rule, category, missing}
    errors: list[str] = field(default_factory=list)
    rules_evaluated: int = 0
    notes: list[str] = field(default_factory=list)
    not_assessed: list[str] = field(default_factory=list)   # whole categories without any evidence


# categories whose evidence comes from one source: without that source, say so once
NO_SOURCE = (
    (("failure", "network"), "logs.present",
     "failures: no logs found (pass the folder with the ranks' logs, or capture with `ddpdoctor run`)"),
    (("config",), "run.captured",
     "configuration checks (sampler, set_epoch, find_unused_parameters): need the settings a `ddpdoctor run` bundle records"),
    (VERDICT_CATEGORIES, "trace.present", "performance: no profiler traces"),
)


def _source_missing(category: str, facts: dict) -> str | None:
    for cats, fact, text in NO_SOURCE:
        if category in cats and not facts.get(fact):
            return text
    return None


def _label(c: float | None) -> str | None:
    if c is None:
        return None
    t = metric_params()["verdict"]
    return "high" if c >= t["high_from"] else "medium" if c >= t["medium_from"] else "low"


def _order(f: Finding, verdict_rule: str | None) -> tuple:
    if f.category in FIRST:
        return (0, SEVERITY_ORDER[f.severity], f.rule)
    if f.rule == verdict_rule:
        return (1, 0, f.rule)
    if f.cost is not None:
        return (2, -f.cost, f.rule)
    return (3, SEVERITY_ORDER[f.severity], f.rule)


def decide(findings: list[Finding], facts: dict) -> Verdict:
    v = _decide(findings, facts)
    failures = sorted((f for f in findings if f.category == "failure"), key=lambda f: SEVERITY_ORDER[f.severity])
    if failures and v.bottleneck:
        # the recorded steps end in (or lead to) the failure: their numbers are not a steady state
        v.summary = (f"The run failed: {failures[0].summary} Performance of the recorded steps, which the "
                     f"failure may distort: {v.summary}")
        if v.confidence is not None:
            v.confidence = min(v.confidence, metric_params()["verdict"]["failed_run_max_confidence"])
            v.confidence_label = _label(v.confidence)
        v.expected_speedup = None          # no steady state to speed up: fix the failure first
    elif v.expected_speedup:
        v.summary += f" Removing it: up to {v.expected_speedup:.2f}x faster steps."
    return v


def _decide(findings: list[Finding], facts: dict) -> Verdict:
    failed = any(f.category == "failure" for f in findings)
    perf = sorted((f for f in findings if f.category in VERDICT_CATEGORIES and f.cost is not None),
                  key=lambda f: -f.cost)
    if perf:
        top = perf[0]
        runner = perf[1].cost if len(perf) > 1 else 0.0
        if top.confidence is None:
            margin = (top.cost - runner) / top.cost if top.cost > 0 else 0.0
            agreement = top.agreement if top.agreement is not None else 0.5
            top.confidence = round(0.5 * margin + 0.5 * agreement, 3)
        summary = f"{top.label}: {top.summary}"
        return Verdict(top.category, top.confidence, _label(top.confidence), top.expected_speedup,
                       summary, top.rule, failed, top.label)
    compute = [f for f in findings if f.category == "compute" and f.cost is None]
    if compute:
        top = compute[0]
        if top.confidence is None:
            top.confidence = top.agreement if top.agreement is not None else 0.5
        return Verdict("compute", top.confidence, _label(top.confidence), None,
                       f"{top.label}: {top.summary}", top.rule, failed, top.label)
    if not facts.get("trace.present"):
        failures = [f for f in findings if f.category in FIRST]
        summary = (failures[0].summary if failures else "no traces: only logs were analyzed, and they show no failure")
        return Verdict(None, None, None, None, summary, failures[0].rule if failures else None, failed)
    return Verdict(None, None, None, None,
                   "undetermined: no rule could classify this run (see the abstentions)", None, failed)


def diagnose(facts: dict, ruleset: RuleSet, log_search=None) -> Diagnosis:
    outcomes: list[Outcome] = []
    for rule in ruleset.active():
        outcomes.append(evaluate(rule, facts, ruleset.params.get(rule.id), log_search))
    findings = [o.finding for o in outcomes if o.finding is not None]
    verdict = decide(findings, facts)
    findings.sort(key=lambda f: _order(f, verdict.rule))
    fired_categories = {f.category for f in findings}
    abstained, not_assessed = [], []
    for o in outcomes:
        if o.status != "abstain":
            continue
        rule = ruleset.rules[o.rule]
        if rule.category in fired_categories:
            continue
        why = _source_missing(rule.category, facts)
        if why:
            if why not in not_assessed:
                not_assessed.append(why)
            continue
        abstained.append({"rule": rule.id, "category": rule.category, "missing": o.missing})
    errors = [o.error for o in outcomes if o.error]
    return Diagnosis(verdict=verdict, findings=findings, abstained=abstained, errors=errors,
                     rules_evaluated=len(outcomes), notes=list(ruleset.notes), not_assessed=not_assessed)
