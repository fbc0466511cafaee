"""A rule's role in the verdict, its eligibility and the evidence others read are declared in its TOML or
rules/metrics.toml (issue 30); that no rule id is quoted in Python is tests/test_house.py's one check."""

import numpy as np


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
