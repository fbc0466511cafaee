"""Run the test cases stored in rule files (``[[test]]``): each case gives facts (over its folder's
base facts, basefacts.py) and what the rule must do with them (fire, stay quiet, abstain); what it
produced (summary and fix titles, exactly) is compared with the rule's snapshot (snapshot.py).
Used by the test suite and `ddpdoctor rules test [--update]`."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..expr import Vec
from .engine import Outcome, evaluate
from .model import Rule, RuleCase

VECTOR_ROOTS = ("rank.", "step.")
# a firing case must read as a sentence a user could act on: no clause that ends in nothing ("raised
# RuntimeError: ."), and (built-in rules) nothing left unsaid for a fact the case lacks: no summary part left
# out, no fix not offered, no summary that is only the rule's title (docs/DESIGN.md)
DEGENERATE = re.compile(r": \.|\s\.$")

# exit codes of `ddpdoctor rules test`
EXIT_PASSED = 0  # every case as expected and equal to its snapshot (or the snapshots were updated)
EXIT_FAILED = 1  # a case failed its expect or checks, or a snapshot differs, is left over, or is missing
# (a user rule without any snapshot is only noted: its cases are checked by expect)
# 2: a rule file, a base_facts.toml or rules/layout.toml is malformed (raised as a RuleError when loading)


def case_facts(case: RuleCase) -> dict:
    """Facts of a case (its folder's base facts and its own): lists under rank.* / step.* become
    per-rank values (ranks 0, 1, …)."""
    out: dict[str, object] = {}
    stored = case.all_facts()
    ranks = stored.get("run.ranks")
    for k, v in stored.items():
        if k.startswith(VECTOR_ROOTS) and isinstance(v, list):
            labels = ranks if (ranks and len(ranks) == len(v) and k.startswith("rank.")) else list(range(len(v)))
            arr = np.asarray(v, dtype=object if any(isinstance(x, str) for x in v) else float)
            out[k] = Vec(arr, np.asarray(labels, dtype=int))
        else:
            out[k] = v
    out.setdefault("trace.present", True)
    return out


def log_search(case: RuleCase):
    def search(patterns):
        hits = [e for e in case.log if any(re.search(p, str(e.get("line", ""))) for p in patterns)]
        first = hits[0] if hits else {}
        return {
            "count": len(hits),
            "ranks": sorted({int(e["rank"]) for e in hits if "rank" in e}),
            "first_rank": first.get("rank"),
            "first_time": first.get("time"),
            "first_line": first.get("line"),
            "first_file": first.get("file"),
        }

    return search


def evaluate_case(rule: Rule, case: RuleCase) -> Outcome:
    return evaluate(rule, case_facts(case), case.params, log_search(case) if rule.log_patterns else None)


def check_outcome(case: RuleCase, out: Outcome, strict: bool = True) -> list[str]:
    """Problems with a case's outcome (empty when it passes); ``strict``: its texts must not be degenerate
    (the built-in rules' bar; a user's rule is held to its own expectations)."""
    if out.status == "error":
        return [out.error or "error"]
    problems = []
    if out.status != case.expect:
        extra = f" (missing: {', '.join(out.missing)})" if out.missing else ""
        problems.append(f"expected {case.expect}, got {out.status}{extra}")
    f = out.finding
    if f is None:
        return problems
    texts = [("summary", f.summary)] + [(f"fix {i} title", x.title) for i, x in enumerate(f.fixes, 1)]
    if strict and f.summary == f"{f.title}.":
        problems.append(
            "the summary is not a sentence a user could act on (nothing of it can be said without a fact the case "
            f"lacks: {', '.join(f.not_recorded)}): give the case the facts a real run has"
        )
    elif strict and f.not_recorded:  # a part left out or a fix not offered: the case shows less than a real run
        problems.append(
            f"a part of the summary or a fix is not said without {', '.join(f.not_recorded)}: "
            "give the case the facts a real run has"
        )
    for where, text in texts if strict else ():
        m = DEGENERATE.search(text)
        if m:
            near = text[max(0, m.start() - 40) : m.end() + 20]
            problems.append(
                f"the {where} is not a sentence a user could act on (…{near}…): give the case the facts a real run has"
            )
    for text in case.summary_contains:
        if text not in f.summary:
            problems.append(f"summary lacks {text!r}: {f.summary!r}")
    blob = "\n".join(x.title + "\n" + x.change for x in f.fixes)
    for text in case.fixes_contain:
        if text not in blob:
            problems.append(f"no fix contains {text!r}; fixes: {[x.title for x in f.fixes]}")
    for text in case.fixes_exclude:
        if text in blob:
            problems.append(f"a fix contains {text!r}, which it must not here")
    if case.first_fix is not None and not (f.fixes and case.first_fix in f.fixes[0].title):
        problems.append(f"the first fix is not {case.first_fix!r}; fixes: {[x.title for x in f.fixes]}")
    if case.ranks is not None and f.ranks != case.ranks:
        problems.append(f"expected ranks {case.ranks}, got {f.ranks}")
    return problems


def run_case(rule: Rule, case: RuleCase) -> list[str]:
    """Problems with this case (empty when it passes); the snapshot is checked by :func:`run_rule`."""
    return check_outcome(case, evaluate_case(rule, case), rule.origin == "built-in")


def run_rule(rule: Rule) -> tuple[list[tuple[str, list[str]]], str]:
    """Each case's problems, and the rule's snapshot text as the cases render now."""
    from .snapshot import render

    outcomes, problems = [], []
    for case in rule.tests:
        out = evaluate_case(rule, case)
        outcomes.append((case.name, out))
        problems.append((case.name, check_outcome(case, out, rule.origin == "built-in")))
    return problems, render(rule, outcomes)


def run_all(
    rules: list[Rule], roots: list[Path], update: bool, echo: Callable[[str], None], disabled: Sequence[Rule] = ()
) -> int:
    """`ddpdoctor rules test`: every case of every rule, against its snapshot (written with ``update``);
    the snapshots of ``disabled`` rules are left alone. Returns the exit code (EXIT_PASSED or EXIT_FAILED)."""
    from . import snapshot

    failed = total = bad_cases = unsnapped = 0
    changed = []
    for r in rules:
        if not r.tests:
            echo(f"{r.id}: no test cases")
            failed += 1
            continue
        problems, text = run_rule(r)
        for name, probs in problems:
            total += 1
            if probs:
                failed += 1
                bad_cases += 1
                echo(f"FAIL {r.id} {name}: {'; '.join(probs)}")
        if update:
            if snapshot.write(r, text):
                changed.append(str(snapshot.snapshot_path(r)))
            continue
        if r.origin == "user" and not snapshot.snapshot_path(r).is_file():
            unsnapped += 1
            continue
        lines = snapshot.diff(r, text)
        if lines:
            failed += 1
            echo(f"FAIL {r.id}: its cases no longer render as {snapshot.snapshot_path(r)} says:")
            for line in lines:
                echo(f"    {line}")
    for p in snapshot.orphans([*rules, *disabled], roots):
        if update:
            p.unlink()
            changed.append(f"{p} (removed: no rule has this id here)")
        else:
            failed += 1
            echo(f"FAIL {p}: a snapshot of no rule (run `ddpdoctor rules test --update` to remove it)")
    for c in changed:
        echo(f"updated {c}")
    if unsnapped:
        echo(
            f"note: {unsnapped} user rule{'s' if unsnapped > 1 else ''} without a snapshot: checked by expect only "
            "(`ddpdoctor rules test --update` writes snapshots/<id>.snap beside each rule)"
        )
    echo(
        f"{total - bad_cases} of {total} rule test cases passed"
        + (f"; {len(changed)} snapshot files written" if update else "")
    )
    return EXIT_FAILED if failed else EXIT_PASSED
