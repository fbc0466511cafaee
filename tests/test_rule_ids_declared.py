"""No rule id is quoted in the verdict, bundle or metrics code: a rule's role in the verdict, its
eligibility and the evidence others read are declared in its TOML or rules/metrics.toml (issue 30)."""

import re
from pathlib import Path

import numpy as np

import ddpdoctor

PKG = Path(ddpdoctor.__file__).parent
RULE_ID = re.compile(r"\b(?:IM|CM|CP|DL|CF|FL|NET)\d{3}\b")


def _files():
    yield PKG / "rules_engine" / "verdict.py"
    for sub in ("bundle", "metrics"):
        yield from sorted((PKG / sub).rglob("*.py"))


def test_no_rule_id_in_verdict_bundle_metrics():
    hits = [
        f"{p.relative_to(PKG)}:{i}: {line.strip()}"
        for p in _files()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if RULE_ID.search(line)
    ]
    assert not hits, "rule ids quoted in code (declare the role in the rule or rules/metrics.toml):\n" + "\n".join(hits)


def test_the_grep_finds_a_rule_id():
    assert RULE_ID.search('if f.rule == "IM001":') and not RULE_ID.search("IM0001 or XIM001")


def test_the_straggler_role_is_declared():
    from ddpdoctor.resources import metric_params

    assert metric_params()["verdict"]["arrival_straggler_rules"]


def _dl001_fix_titles(facts: dict) -> list[str]:
    from ddpdoctor.expr import Vec
    from ddpdoctor.rules_engine.engine import evaluate
    from ddpdoctor.rules_engine.registry import load_rules

    ruleset = load_rules()
    rule = next(r for r in ruleset.rules.values() if r.name == "dataloader.wait")
    facts = {k: Vec(np.array(v), np.array([0, 1])) if isinstance(v, list) else v for k, v in facts.items()}
    out = evaluate(rule, facts, ruleset.params.get(rule.id), None)
    assert out.finding is not None
    return [f.title + "\n" + (f.change or "") for f in out.finding.fixes]


SHORT_EPOCHS = {
    "rank.share.dataloader_wait": [0.30, 0.32],
    "rank.dataloader_wait": [30000.0, 32000.0],
    "run.ranks_analyzed": 2,
    "run.device": "cpu",
    "config.dataloader.num_workers": 2,
    "config.dataloader.persistent_workers": False,
    "config.dataloader.batches_per_epoch": 2,
    "host.cpus_per_local_rank": 1,
}


def test_the_loader_rule_offers_persistent_workers_once():
    for epoch_batches in (2, 5005):  # restarts material (its own first fix) and negligible (the generic one)
        fixes = _dl001_fix_titles({**SHORT_EPOCHS, "config.dataloader.batches_per_epoch": epoch_batches})
        assert sum("persistent_workers=True" in f and "alive between epochs" in f for f in fixes) == 1, fixes
