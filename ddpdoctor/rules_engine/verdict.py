"""From rule outcomes to a diagnosis: failures first, then one verdict, then the rest.

* Every fired performance finding with a cost goes into ONE ranked list of costs
  (``Diagnosis.costs``); every output reads that list, nothing recomputes a "biggest cost".
* The verdict is the first entry of that list that is *material* (its cost reaches its
  category's materiality in rules/metrics.toml) and *eligible* (alternating imbalance on a
  host that was recorded as contended is machine noise, not the workload).  Its expected
  speed-up is the upper bound 1 / (1 − cost).
* When nothing material is left, the compute-bound rule speaks (with the GPU utilization),
  or the run has no dominant avoidable cost; small costs stay listed as findings.
* Confidence = evidence × ranks × steps × noise × inference (docs/RULES.md#confidence), with
  hints that say what to record to raise it.
* A category whose rules all abstained is listed with the facts that were missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..expr import Vec
from ..resources import metric_defaults, metric_params
from .confidence import calibrate
from .edge import at_line_reason, edge_confidence, name_at_line
from .eligibility import (
    is_sporadic,
    late_in_a_shared_cost,
    late_in_saturated_cores,
    same_work_on_shared_cores,
    saturating_loader,
    starved_by_loader,
    straggler_explained,
    unexplained_straggler,
)
from .engine import Finding, Outcome, drop_yielded, evaluate
from .model import VERDICT_CATEGORIES
from .registry import RuleSet
from .undetermined import NOISE, no_dominant_summary, undetermined_summary

SEVERITY_ORDER = {"critical": 0, "high": 1, "medium": 2, "low": 3, "info": 4}
FIRST = ("failure", "network")


@dataclass
class Verdict:
    bottleneck: str | None  # dataloader | communication | compute | imbalance | None
    confidence: float | None
    confidence_label: str | None  # high | medium | low
    expected_speedup: float | None
    summary: str
    rule: str | None = None
    failed: bool = False  # a failure finding was made (it comes first in every output)
    label: str | None = None  # e.g. "dataloader-bound", "host-bound (the GPU waits for the CPU)"
    confidence_hints: list[str] = field(default_factory=list)  # what to record to raise the confidence
    speedup_is_lower_bound: bool = False  # the deciding rule measured only part of its cost: "at least"


# the words every "set aside as machine noise" reason of a Cost contains (the summary looks for them)


@dataclass
class Cost:
    """One entry of the ranked list of costs every output reads."""

    rule: str
    category: str
    label: str
    cost: float
    material: bool  # reaches its category's materiality
    eligible: bool = True  # may decide the verdict (False: noise, see `why_not`)
    why_not: str | None = None
    at_line: bool = False  # within the step-to-step noise of its rule's threshold (edge.py): decides nothing


@dataclass
class Diagnosis:
    verdict: Verdict
    findings: list[Finding]
    abstained: list[dict] = field(default_factory=list)  # {rule, category, missing}
    errors: list[str] = field(default_factory=list)
    rules_evaluated: int = 0
    notes: list[str] = field(default_factory=list)
    not_assessed: list[str] = field(default_factory=list)  # whole categories without any evidence
    costs: list[Cost] = field(default_factory=list)  # ranked, biggest first; the verdict reads it


# categories whose evidence comes from one source: without that source, say so once
NO_SOURCE = (
    (
        ("failure", "network"),
        "logs.present",
        "failures: no logs found (pass the folder with the ranks' logs, or capture with `ddpdoctor run`)",
    ),
    (
        ("config",),
        "run.captured",
        "configuration checks (sampler, set_epoch, find_unused_parameters): need the settings a `ddpdoctor run` bundle records",
    ),
    (VERDICT_CATEGORIES, "trace.present", "performance: no profiler traces"),
)


def _source_missing(category: str, facts: dict) -> str | None:
    for cats, fact, text in NO_SOURCE:
        if category in cats and not facts.get(fact):
            return text
    return None


def _label(c: float | None, t: dict) -> str | None:
    if c is None:
        return None
    return "high" if c >= t["high_from"] else "medium" if c >= t["medium_from"] else "low"


def _order(f: Finding, verdict_rule: str | None, spec: dict, noise: frozenset[str] = frozenset()) -> tuple:
    """Every output's order of findings: by class (rules/metrics.toml [order]: ``spec``), then within a class
    by a measured cost, largest first, then severity, then rule id. A finding at its line (edge.py) or whose
    cost was set aside as machine noise (the rule ids in `noise`) goes to the last class: it says how the run
    was recorded, not what to change first."""
    classes = list(spec.get("classes", ["failure", "verdict", "cost"]))
    cls = f.order if f.order in classes else "cost"
    if (
        f.rule == verdict_rule
        and cls not in spec.get("keep_own_class", [])
        and "verdict" in classes
        and classes.index("verdict") < classes.index(cls)
    ):
        cls = "verdict"
    at_line = f.edge is not None and f.edge.at_line
    if (at_line or f.rule in noise) and f.rule != verdict_rule and cls in ("verdict", "cost"):
        cls = classes[-1]  # context, not what to fix first
    within = (0, -f.cost, 0) if f.cost is not None else (1, 0.0, SEVERITY_ORDER[f.severity])
    return (classes.index(cls), *within, f.rule)


def ranked_costs(
    findings: list[Finding], facts: dict | None = None, reevaluate=None, thresholds: dict | None = None
) -> list[Cost]:
    """Every fired performance finding with a cost, biggest first, marked material / eligible.
    `reevaluate(rule_id, facts)` runs one rule again on other facts (see _judge_net_of_wait); ``thresholds``:
    the analysis's rules/metrics.toml (default: as shipped)."""
    facts = facts or {}
    t = (thresholds or metric_defaults())["verdict"]
    materiality = t.get("materiality", {})
    contended = any(f.rule in t.get("contention_rules", []) for f in findings)
    explained, arrival = straggler_explained(facts, t), set(t.get("arrival_straggler_rules", []))
    loader = saturating_loader(findings, t)  # the job's own DataLoader workers oversubscribe its CPUs
    out, sporadic = [], []
    for f in sorted(
        (f for f in findings if f.category in VERDICT_CATEGORIES and f.cost is not None),
        key=lambda f: (-(f.cost or 0.0), f.rule),
    ):
        cost = f.cost or 0.0  # never None here: findings without a cost are left out above
        c = Cost(f.rule, f.category, f.label, round(cost, 6), material=cost >= materiality.get(f.category, 0.0))
        if not c.material:
            c.why_not = f"below the {f.category} materiality of {materiality.get(f.category, 0.0):.0%} of the step"
        alternating = f.category == "imbalance" and (
            f.rule in t.get("alternating_rules", [])
            or (f.agreement is not None and f.agreement < t["alternating_max_agreement"])
        )
        if loader is not None and f is not loader and starved_by_loader(f, facts, t):
            c.eligible = False
            c.why_not = (
                f"{facts.get('run.backend')}'s collectives run on the CPUs the job's own DataLoader workers "
                f"oversubscribe ({loader.rule}): their time waits for those cores, so the loading is the cost to fix first"
            )
        elif loader is not None and f.rule in arrival and late_in_saturated_cores(facts, t):
            c.eligible = False
            c.why_not = (
                f"the late rank is late in the CPU load of the job's own DataLoader workers ({loader.rule}: the job "
                f"wants more CPUs than its host has) and nothing of its own explains it: fixing {loader.rule} "
                "removes its lateness too"
            )
        elif contended and alternating and not (f.rule in arrival and explained):
            c.eligible = False
            c.why_not = f"the ranks take turns being late on a contended host: {NOISE}"
        elif alternating and f.rule in arrival and unexplained_straggler(facts, t):
            # no other process measured, but the lateness moves between ranks and the late rank does nothing of
            # its own: a rank with more work is late every step; one the scheduler delays is late in some
            c.eligible = False
            c.why_not = (
                f"the ranks take turns being late (the straggler is last in {f.agreement:.0%} of the steps) "
                f"and nothing the late rank does differs: {NOISE}"
            )
        elif contended and f.rule in arrival and unexplained_straggler(facts, t):
            c.eligible = False
            c.why_not = (
                "the late rank computes the same inputs longer on a contended host and nothing it does "
                f"differs (no uneven inputs, no extra work seen): {NOISE}"
            )
        elif f.rule in arrival and (shared := late_in_a_shared_cost(findings, facts, t)):
            # contended or not: the late rank does the same as the others (nothing of its own explains
            # it) and is late in a cost every rank pays; removing that cost removes its lateness too
            c.eligible = False
            where = "which lands harder on one rank of a contended host" if contended else "and nothing of its own"
            c.why_not = (
                f"the late rank is late in the {shared.category} cost every rank pays ({shared.rule}), {where}: "
                + (NOISE if contended else f"fixing {shared.rule} removes its lateness too")
            )
        elif f.rule in arrival and same_work_on_shared_cores(facts, t):
            c.eligible = False
            c.why_not = (
                "the late rank computes the same inputs longer on CPU cores its host shares among "
                f"{facts.get(t['shared_cores']['ranks_on_host'])} ranks, and nothing it does differs: the cores "
                "it got, not the workload"
            )
        elif contended and f.category != "imbalance" and f is not loader and is_sporadic(f, facts, t):
            # (a loader that oversubscribes the CPUs shows its wait where the scheduler starved the workers)
            c.eligible = False
            on = f"rank {f.ranks[0]}" if len(f.ranks) == 1 else f"ranks {', '.join(map(str, f.ranks))}"
            c.why_not = (
                f"seen on {on} only, in {f.agreement:.0%} of the rank-steps, "
                f"on a contended host: {NOISE} (which runs the same code on every rank)"
            )
            sporadic.append(c)
        if c.eligible and f.edge is not None and f.edge.at_line:
            c.eligible, c.at_line = False, True
            c.why_not = at_line_reason(f)
        out.append(c)
    if sporadic and reevaluate is not None:
        _judge_net_of_wait(out, sporadic, facts, t, reevaluate)
    _fold_late_rank_costs(out, {f.rule: f for f in findings}, facts, t)
    return out


def _judge_net_of_wait(costs: list[Cost], sporadic: list[Cost], facts: dict, t: dict, reevaluate) -> None:
    """When a late rank was set aside as machine noise, the other ranks' steps hold their wait for it,
    which shrinks every other share on those ranks only: a cost that every rank pays can then clear
    its rule's bar on the late rank alone and look sporadic. Judge such a cost again against each
    rank's step net of its wait for peers (the rule run again on those shares); if it then shows on
    every rank, step after step, it is the workload's, not noise. Its cost stays as measured."""
    late_rules = t.get("late_rank_rules", [])
    if not any(c.rule in late_rules and c.material and not c.eligible and NOISE in (c.why_not or "") for c in costs):
        return
    net = net_of_peer_wait(facts)
    if net is None:
        return
    for c in sporadic:
        again = reevaluate(c.rule, net)
        if again is not None and again.cost is not None and not is_sporadic(again, facts, t):
            c.eligible = True
            c.why_not = None


def net_of_peer_wait(facts: dict) -> dict | None:
    """The facts with every step and rank share taken of the step net of the wait for late peers
    (share / (1 - wait share)); None when the wait was not measured."""
    out = dict(facts)
    for level in ("step", "rank"):
        wait = facts.get(f"{level}.share.comm_wait_exposed")
        if not isinstance(wait, Vec):
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            keep = 1.0 - np.nan_to_num(wait.values.astype(float))
            keep = np.where(keep > 0, keep, np.nan)
            prefix = f"{level}.share."
            for k, v in facts.items():
                if (
                    k.startswith(prefix)
                    and isinstance(v, Vec)
                    and v.values.dtype.kind in "fiu"
                    and len(v.values) == len(keep)
                    and np.array_equal(np.asarray(v.ranks), np.asarray(wait.ranks))
                ):
                    out[k] = Vec(v.values.astype(float) / keep, v.ranks)
        out[f"{level}.share.comm_wait_exposed"] = Vec(np.zeros(len(keep)), wait.ranks)
    return out


def _fold_late_rank_costs(costs: list[Cost], by_rule: dict[str, Finding], facts: dict, t: dict) -> None:
    """A cost that only the late rank(s) pay (e.g. DataLoader wait on the straggler alone) is that rank's
    extra time: the other ranks pay it as waiting, so the straggler finding carries it and this one does
    not decide the verdict on its own."""
    late_rules = t.get("late_rank_rules", [])
    straggler = next((c for c in costs if c.rule in late_rules and c.material and c.eligible), None)
    late = set(by_rule[straggler.rule].ranks or []) if straggler is not None else set()
    analyzed = facts.get("run.ranks_analyzed")
    if straggler is None or not late or not isinstance(analyzed, int) or analyzed < 2:
        return
    for c in costs:
        ranks = set(by_rule[c.rule].ranks or [])
        if c.category != "imbalance" and c.eligible and ranks and ranks <= late and len(ranks) < analyzed:
            c.eligible = False
            on = f"rank {min(ranks)}" if len(ranks) == 1 else f"ranks {', '.join(map(str, sorted(ranks)))}"
            c.why_not = (
                f"paid only on the late {on}: the others wait for "
                f"it, so it is counted in the imbalance ({straggler.rule})"
            )


def decide(
    findings: list[Finding], facts: dict, costs: list[Cost] | None = None, thresholds: dict | None = None
) -> Verdict:
    """The verdict (``thresholds``: the analysis's rules/metrics.toml, default as shipped)."""
    thresholds = thresholds or metric_defaults()
    t = thresholds["verdict"]
    if costs is None:
        costs = ranked_costs(findings, facts, thresholds=thresholds)
    v = _decide(findings, facts, costs, thresholds)
    # the same order as every output lists them (_order): severity, then rule id
    failures = sorted((f for f in findings if _is_failure(f)), key=lambda f: (SEVERITY_ORDER[f.severity], f.rule))
    if failures and v.bottleneck:
        # the recorded steps end in (or lead to) the failure: their numbers are not a steady state
        v.summary = (
            f"The run failed: {failures[0].summary} Performance of the recorded steps, which the "
            f"failure may distort: {v.summary}"
        )
        if v.confidence is not None:
            v.confidence = min(v.confidence, t["failed_run_max_confidence"])
            v.confidence_label = _label(v.confidence, t)
        v.expected_speedup = None  # no steady state to speed up: fix the failure first
    elif v.expected_speedup:
        bound = "at least" if v.speedup_is_lower_bound else "up to"
        v.summary += f" Removing it: {bound} {v.expected_speedup:.2f}x faster steps."
    return v


def _is_failure(f: Finding) -> bool:
    """A finding that says the run failed: its class in rules/metrics.toml [order] is "failure" (a failure
    rule, or a critical network fault: a run that could not even connect), not a network warning on a healthy
    run, nor a failure rule that declares another class (a crash after the program ended)."""
    return f.order == "failure"


def _decide(findings: list[Finding], facts: dict, costs: list[Cost], thresholds: dict) -> Verdict:
    v = _decide_one(findings, facts, costs, thresholds)
    t = thresholds["verdict"]
    name_at_line(v, costs, {f.rule: f for f in findings}, lambda c: _label(c, t), t)
    return v


def _decide_one(findings: list[Finding], facts: dict, costs: list[Cost], thresholds: dict) -> Verdict:
    t = thresholds["verdict"]
    failed = any(_is_failure(f) for f in findings)
    by_rule = {f.rule: f for f in findings}
    winners = [c for c in costs if c.material and c.eligible]
    if winners:
        top = by_rule[winners[0].rule]
        runner = next((c.cost for c in costs if c.rule != top.rule and c.eligible), 0.0)
        if top.confidence is None:
            cost = top.cost if top.cost is not None else winners[0].cost
            margin = (cost - runner) / cost if cost > 0 else 0.0
            agreement = top.agreement if top.agreement is not None else 0.5
            top.confidence = round(0.5 * margin + 0.5 * agreement, 3)
        conf, hints = calibrate(top.confidence, top.rule, facts, top.category, thresholds)
        conf, hints = edge_confidence(conf, hints, top, t)
        top.confidence = conf
        summary = f"{top.label}: {top.summary}"
        return Verdict(
            top.category,
            conf,
            _label(conf, t),
            top.expected_speedup,
            summary,
            top.rule,
            failed,
            top.label,
            hints,
            speedup_is_lower_bound=top.speedup_is_lower_bound,
        )
    compute = [f for f in findings if f.category == "compute" and f.cost is None]
    if compute:
        top = compute[0]
        evidence = (
            top.confidence if top.confidence is not None else (top.agreement if top.agreement is not None else 0.5)
        )
        conf, hints = calibrate(evidence, top.rule, facts, top.category, thresholds)
        conf, hints = edge_confidence(conf, hints, top, t)
        top.confidence = conf
        return Verdict(
            "compute", conf, _label(conf, t), None, f"{top.label}: {top.summary}", top.rule, failed, top.label, hints
        )
    if not facts.get("trace.present"):
        failures = [f for f in findings if f.category in FIRST]
        summary = failures[0].summary if failures else "no traces: only logs were analyzed, and they show no failure"
        return Verdict(None, None, None, None, summary, failures[0].rule if failures else None, failed)
    if costs:
        return Verdict(
            None, None, None, None, no_dominant_summary(costs, findings, t), None, failed, "no dominant avoidable cost"
        )
    return Verdict(None, None, None, None, f"undetermined: {undetermined_summary(facts)}", None, failed)


def diagnose(facts: dict, ruleset: RuleSet, log_search=None, thresholds: dict | None = None) -> Diagnosis:
    """Every rule in force on ``facts``, and the verdict.  ``thresholds``: the analysis's rules/metrics.toml
    (``AnalysisContext.thresholds``; default: the ruleset's own overrides applied to the shipped file)."""
    thresholds = thresholds if thresholds is not None else metric_params(ruleset.metrics)
    outcomes: list[Outcome] = []
    for rule in ruleset.active():
        outcomes.append(evaluate(rule, facts, ruleset.params.get(rule.id), log_search, thresholds))
    findings = drop_yielded([o.finding for o in outcomes if o.finding is not None], ruleset.rules)

    def reevaluate(rule_id: str, other_facts: dict):
        return evaluate(
            ruleset.rules[rule_id], other_facts, ruleset.params.get(rule_id), log_search, thresholds
        ).finding

    costs = ranked_costs(findings, facts, reevaluate, thresholds)
    verdict = decide(findings, facts, costs, thresholds)
    noise = frozenset(c.rule for c in costs if NOISE in (c.why_not or ""))
    order = thresholds.get("order", {})
    findings.sort(key=lambda f: _order(f, verdict.rule, order, noise))
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
    return Diagnosis(
        verdict=verdict,
        findings=findings,
        abstained=abstained,
        errors=errors,
        rules_evaluated=len(outcomes),
        notes=list(ruleset.notes),
        not_assessed=not_assessed,
        costs=costs,
    )
