"""Verdicts that know their edge (issue 41 item 1): a finding within the step-to-step noise of the threshold
that made it fire decides no verdict, the verdict names it and is never "high"; the deciding finding's distance
to its threshold scales its confidence; the card does not list a finding at its line. Small inputs built here."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ddpdoctor.expr import Vec
from ddpdoctor.report.card import render_card
from ddpdoctor.resources import metric_params
from ddpdoctor.rules_engine.edge import confidence_factor, measure
from ddpdoctor.rules_engine.registry import build_ruleset
from ddpdoctor.rules_engine.verdict import diagnose


def _steps(rank0, rank1):
    return Vec(np.array(list(rank0) + list(rank1), dtype=float), np.array([0] * len(rank0) + [1] * len(rank1)))


def test_the_edge_is_the_mean_over_steps_and_its_standard_error():
    # 5 steps per rank, the same on both: mean 0.30, sd 0.02, standard error 0.02 / sqrt(5)
    steps = [0.28, 0.30, 0.32, 0.30, 0.30]
    e = measure(_steps(steps, steps), 0.10, edge_noise=2.0)
    assert e.value == pytest.approx(0.30) and e.threshold == 0.10
    assert e.noise == pytest.approx(np.std(steps, ddof=1) / math.sqrt(5), rel=1e-4)
    assert e.distance > 20 and not e.at_line
    # 11 % against 10 %, with steps from 4 % to 20 %: within two standard errors
    e = measure(_steps([0.04, 0.20, 0.08, 0.15, 0.08], [0.06, 0.18, 0.10, 0.12, 0.09]), 0.10, edge_noise=2.0)
    assert e.value == pytest.approx(0.11, abs=0.005) and e.at_line
    # steps that agree exactly are infinitely far from a threshold they do not touch
    assert measure(_steps([0.3, 0.3], [0.3, 0.3]), 0.1, 2.0).distance == math.inf
    # one step per rank has no spread to judge by; a threshold that is not a number has no edge
    assert measure(_steps([0.3], [0.3]), 0.1, 2.0) is None
    assert measure(_steps(steps, steps), None, 2.0) is None
    assert measure(0.3, 0.1, 2.0) is None


def test_confidence_scales_between_the_noise_and_the_clear_distance():
    t = metric_params()["verdict"]
    e = measure(_steps([0.28, 0.30, 0.32, 0.30, 0.30], [0.28, 0.30, 0.32, 0.30, 0.30]), 0.10, t["edge_noise"])
    assert confidence_factor(e, t) == 1.0 and confidence_factor(None, t) == 1.0
    mid = type(e)(0.1, 0.2, 0.01, (t["edge_noise"] + t["edge_clear"]) / 2, False)
    assert confidence_factor(mid, t) == pytest.approx((t["edge_floor"] + 1) / 2)
    near = type(e)(0.1, 0.11, 0.01, 1.0, True)
    assert confidence_factor(near, t) == t["edge_floor"]


def _comm_facts(rank0, rank1):
    """A 2-rank CPU job whose exposed transfer is these per-step shares; compute is the rest (about 80 %)."""
    comm = _steps(rank0, rank1)
    compute = Vec(0.85 - comm.values, comm.ranks)
    means = Vec(np.array([np.mean(rank0), np.mean(rank1)]), np.array([0, 1]))
    return {
        "trace.present": True,
        "run.device": "cpu",
        "run.ranks": [0, 1],
        "run.ranks_analyzed": 2,
        "run.world_size": 2,
        "run.steps": len(rank0),
        "step.share.comm_transfer_exposed": comm,
        "rank.share.comm_transfer_exposed": means,
        "rank.share.comm": means,
        "step.share.compute": compute,
        "rank.share.compute": Vec(0.85 - means.values, means.ranks),
        "straggler.count": 0,
        "straggler.ranks": [],
    }


def test_a_cost_at_its_line_names_it_beside_the_verdict_and_is_never_high():
    # heavy_compute in issue 41: 11 % exposed transfer against CM001's 10 %, steps from 4 % to 20 %
    facts = _comm_facts([0.04, 0.20, 0.08, 0.15, 0.08], [0.06, 0.18, 0.10, 0.12, 0.09])
    d = diagnose(facts, build_ruleset())
    cm = next(c for c in d.costs if c.rule == "CM001")
    assert cm.material and cm.at_line and not cm.eligible and "within the step-to-step noise" in cm.why_not
    assert d.verdict.rule == "CP001" and d.verdict.label == "compute-bound; communication at the 10 % line"
    assert d.verdict.confidence <= metric_params()["verdict"]["at_line_max_confidence"]
    assert d.verdict.confidence_label != "high"
    assert "Communication (CM001) is at its line" in d.verdict.summary
    assert d.verdict.confidence_hints[0].startswith("communication is within the step-to-step noise of its 10 %")
    # the same 11 % measured steadily (every step 10.5-11.5 %) is clear of its line: it decides
    steady = _comm_facts([0.105, 0.115, 0.11, 0.11, 0.11], [0.11, 0.105, 0.115, 0.11, 0.11])
    d = diagnose(steady, build_ruleset())
    assert d.verdict.rule == "CM001" and d.verdict.label == "communication-bound"


def test_a_deciding_finding_near_its_line_loses_confidence():
    # 30 % steadily: full confidence; 20 % with steps from 8 % to 32 %: 2-4 standard errors, less sure
    clear = diagnose(_comm_facts([0.3] * 5, [0.3] * 5), build_ruleset()).verdict
    near = diagnose(
        _comm_facts([0.08, 0.32, 0.12, 0.28, 0.20], [0.09, 0.31, 0.13, 0.27, 0.20]), build_ruleset()
    ).verdict
    assert clear.rule == near.rule == "CM001"
    assert near.confidence < clear.confidence and near.confidence_label != "high"
    assert "is near CM001's 10 % threshold" in near.confidence_hints[0]


def _card_doc(edge):
    f = {
        "rule": "IM001",
        "category": "imbalance",
        "title": "One rank is late and every other rank waits for it",
        "summary": "s",
        "cost": 0.16,
        "fixes": [{"title": "Look at rank 1", "change": "x", "kind": "code"}],
        "edge": edge,
    }
    cp = {"rule": "CP001", "category": "compute", "title": "The step is spent computing", "summary": "c", "fixes": []}
    return {
        "schema": "ddpdoctor.diagnosis/1",
        "inputs": ["runs/a"],
        "verdict": {"bottleneck": "compute", "label": "compute-bound", "rule": "CP001", "summary": "c"},
        "costs": [],
        "findings": [cp, f],
        "facts": {},
    }


def test_the_card_does_not_list_a_finding_at_its_line():
    """comm_heavy in issue 41: a spurious IM001 (16 %, late in turns) appeared in 2 of 3 runs."""
    at_line = {"threshold": 0.05, "value": -0.10, "noise": 0.24, "distance": 0.64, "at_line": True}
    text = "\n".join(render_card(_card_doc(at_line)))
    assert "[IM001]" not in text and "Look at rank 1" not in text
    clear = dict(at_line, value=0.4, noise=0.01, distance=35.0, at_line=False)
    assert "[IM001]" in "\n".join(render_card(_card_doc(clear)))


def test_a_cost_at_its_line_under_the_deciding_cost_changes_nothing():
    """slow_loader in 2 of 10 runs: an 11 % transfer at its line beside a 78 % DataLoader wait. It would not
    have decided, so the verdict's label and confidence stay as they are (stable from run to run)."""
    facts = _comm_facts([0.04, 0.20, 0.08, 0.15, 0.08], [0.06, 0.18, 0.10, 0.12, 0.09])
    wait = [0.75, 0.80, 0.78, 0.79, 0.77]
    facts["step.share.dataloader_wait"] = _steps(wait, wait)
    facts["rank.share.dataloader_wait"] = Vec(np.array([0.78, 0.78]), np.array([0, 1]))
    d = diagnose(facts, build_ruleset())
    assert next(c for c in d.costs if c.rule == "CM001").at_line
    assert d.verdict.rule == "DL001" and d.verdict.label == "dataloader-bound", d.verdict.label
    assert "at its line" not in d.verdict.summary


def test_no_dominant_cost_does_not_call_a_cost_at_its_line_small():
    """accum_without_no_sync on a loaded host: 15 % ± 8.5 % transfer at CM001's line, nothing else material."""
    facts = _comm_facts([0.264, 0.242, 0.099, 0.199, 0.039], [0.141, 0.286, 0.027, 0.131, 0.106])
    facts["step.share.compute"] = Vec(np.full(10, 0.4), facts["step.share.compute"].ranks)
    facts["rank.share.compute"] = Vec(np.array([0.4, 0.4]), np.array([0, 1]))
    v = diagnose(facts, build_ruleset()).verdict
    assert v.bottleneck is None and v.label == "no dominant avoidable cost; communication at the 10 % line"
    assert "stays small" not in v.summary and "within the step-to-step noise of its threshold" in v.summary
    assert "Communication (CM001) is at its line" in v.summary and ": ;" not in v.summary


def test_ranks_that_take_turns_in_a_cost_the_job_pays_every_step_are_not_noise():
    """io_wait_loader_workers2: 2 workers feed the ranks in turn, so each rank's DataLoader wait alternates
    between 0 and 30-80 % of its step while the job waits about a quarter of every step. The standard error is
    that of the job's per-step mean over ranks, not of one rank's alternating steps."""
    r0 = [0.289, 0.002, 0.558, 0.001, 0.169, 0.003, 0.36]
    r1 = [0.002, 0.81, 0.001, 0.336, 0.001, 0.712, 0.001]
    e = measure(_steps(r0, r1), 0.10, edge_noise=2.0)
    job = (np.array(r0) + np.array(r1)) / 2
    assert e.noise == pytest.approx(job.std(ddof=1) / math.sqrt(7), rel=1e-3)
    assert e.value == pytest.approx(0.232, abs=0.002) and e.distance > 2.9 and not e.at_line
    # ranks with different numbers of steps: each rank's own spread (median over ranks)
    e = measure(_steps(r0, r1[:6]), 0.10, edge_noise=2.0)
    assert e.noise == pytest.approx(np.median([np.std(r0, ddof=1), np.std(r1[:6], ddof=1)]) / math.sqrt(6.5), rel=1e-3)


def _accumulating(facts: dict, synced: float) -> dict:
    return {**facts, "train.micro_batches_per_step": 8.0, "train.synced_micro_batches_per_step": synced}


def test_accumulation_without_no_sync_leads_whichever_side_of_the_exposed_share_line():
    """accum_without_no_sync (CI at 64ff584): the count of synced micro-batches is the mechanism, not the exposed
    share, so its fix leads below CM001's 10 % line, at it and above it, said once."""
    rules = build_ruleset()
    below = _accumulating(_comm_facts([0.08, 0.09, 0.10, 0.09, 0.09], [0.09, 0.08, 0.09, 0.10, 0.09]), 8.0)
    d = diagnose(below, rules)
    assert [f.rule for f in d.findings][:1] == ["CM002"] and "CM001" not in {f.rule for f in d.findings}
    assert d.verdict.bottleneck == "communication" and d.verdict.rule == "CM002"
    # at CM001's line (15 % ± 8.5 %): CM001 decides nothing, CM002 stands and the label does not name the
    # communication line beside a communication verdict
    at_line = _accumulating(_comm_facts([0.264, 0.242, 0.099, 0.199, 0.039], [0.141, 0.286, 0.027, 0.131, 0.106]), 8.0)
    d = diagnose(at_line, rules)
    assert next(c for c in d.costs if c.rule == "CM001").at_line
    assert (
        d.verdict.rule == "CM002"
        and d.verdict.label == "communication-bound (gradients all-reduced on every micro-batch)"
    )
    assert "at its line" not in d.verdict.summary and d.findings[0].rule == "CM002"
    # clear of its line (30 %): CM001 decides and its first fix is the same change; CM002 is left out
    clear = _accumulating(_comm_facts([0.3, 0.31, 0.29, 0.3, 0.3], [0.3, 0.29, 0.31, 0.3, 0.3]), 8.0)
    d = diagnose(clear, rules)
    assert d.verdict.rule == "CM001" and "CM002" not in {f.rule for f in d.findings}
    assert "no_sync()" in d.findings[0].fixes[0].title
    # accumulation already under no_sync(): neither speaks of it
    d = diagnose(_accumulating(_comm_facts([0.08] * 5, [0.09] * 5), 1.0), rules)
    assert "CM002" not in {f.rule for f in d.findings}


def test_yields_to_must_name_a_rule(tmp_path):
    from ddpdoctor.errors import InputError
    from ddpdoctor.rules_engine.registry import load_rules

    src = (
        Path(__file__).resolve().parents[1] / "rules/communication/CM002-accumulation-without-no-sync.toml"
    ).read_text()
    (tmp_path / "CM902.toml").write_text(src.replace('id = "CM002"', 'id = "CM902"').replace('["CM001"]', '["CM999"]'))
    with pytest.raises(InputError, match=r"CM902.toml:1: yields_to names no rule: CM999"):
        load_rules([str(tmp_path)])
