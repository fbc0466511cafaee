"""Fix order by mechanism, as data (#27 part 1): the classes of rules/metrics.toml [order], a rule's
`order`, a fix's `leads_if`, and the card's first fix; plus the --try suggestion and its prediction (#27
part 2). Small inputs built in code, and the bundled OOM sample."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ddpdoctor.expr import Vec
from ddpdoctor.report.card import fix_body, render_card
from ddpdoctor.resources import metric_params
from ddpdoctor.rules_engine.engine import Finding, evaluate
from ddpdoctor.rules_engine.model import RuleError, load_rule_file
from ddpdoctor.rules_engine.registry import build_ruleset
from ddpdoctor.rules_engine.verdict import _order
from ddpdoctor.trial import predict
from ddpdoctor.trial.runner import summary_line

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
ORDER = metric_params()["order"]  # rules/metrics.toml [order] as shipped

RULE = """\
id = "US001"
name = "user.ordered"
category = "dataloader"
severity = "high"
title = "A user rule"
when = "median(rank.share.dataloader_wait) >= 0.1"
cost = "median(rank.share.dataloader_wait)"
summary = "fired"

[[fix]]
title = "written first"
change = "a"

[[fix]]
title = "demoted"
change = "b"
trails_if = "median(rank.share.dataloader_wait) >= 0.1"

[[fix]]
title = "selected by the evidence"
change = "c"
leads_if = "median(rank.share.dataloader_wait) >= 0.5"

[[fix]]
title = "not recorded"
change = "d"
leads_if = "host.cpus_per_local_rank >= 2"
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "US001.toml"
    p.write_text(text)
    return p


def test_leads_if_and_trails_if_move_the_fix_the_evidence_selects(tmp_path):
    rule = load_rule_file(_write(tmp_path, RULE))
    facts = {"rank.share.dataloader_wait": Vec(np.array([0.6, 0.7]), np.array([0, 1]))}
    titles = [f.title for f in evaluate(rule, facts, {}).finding.fixes]
    # leads_if holds → first; trails_if holds → last; none, false or not recorded → as written
    assert titles == ["selected by the evidence", "written first", "not recorded", "demoted"]
    facts = {"rank.share.dataloader_wait": Vec(np.array([0.2, 0.3]), np.array([0, 1]))}
    titles = [f.title for f in evaluate(rule, facts, {}).finding.fixes]
    assert titles == ["written first", "selected by the evidence", "not recorded", "demoted"]


def test_a_rule_order_must_be_a_class_of_metrics_toml(tmp_path):
    rule = load_rule_file(_write(tmp_path, RULE.replace('severity = "high"', 'severity = "high"\norder = "generic"')))
    assert rule.order == "generic"
    for bad in ("urgent", "verdict"):  # "verdict" is given by the engine, never declared
        with pytest.raises(RuleError, match="order"):
            load_rule_file(_write(tmp_path, RULE.replace('severity = "high"', f'severity = "high"\norder = "{bad}"')))


def _f(rule, category, severity="high", cost=None, order="cost"):
    return Finding(
        rule=rule,
        name=f"x.{rule.lower()}",
        category=category,
        severity=severity,
        title=rule,
        summary="",
        ranks=[0, 1],
        evidence={},
        fixes=[],
        cost=cost,
        order=order,
    )


def test_findings_are_ordered_by_mechanism_then_cost():
    findings = [
        _f("CP001", "compute", "info", order="generic"),
        _f("IM004", "imbalance", "medium", order="recording"),
        _f("DL002", "dataloader", "medium", cost=0.03),
        _f("CM001", "communication", cost=0.12),
        _f("CF001", "config", order="correctness"),
        _f("FL001", "failure", "critical", order="failure"),
        _f("NET003", "network", "low"),
        _f("DL001", "dataloader", cost=0.40),
    ]
    # the verdict's finding comes right after failures and correctness bugs, whatever its cost
    got = [f.rule for f in sorted(findings, key=lambda f: _order(f, "CM001", ORDER))]
    assert got == ["FL001", "CF001", "CM001", "DL001", "DL002", "NET003", "CP001", "IM004"]
    # a generic verdict (compile the model) keeps its place after the specific findings
    got = [f.rule for f in sorted(findings, key=lambda f: _order(f, "CP001", ORDER))]
    assert got == ["FL001", "CF001", "DL001", "CM001", "DL002", "NET003", "CP001", "IM004"]


def test_the_order_is_data():
    """Swapping two classes in rules/metrics.toml (as --set or a config file would) swaps the findings."""
    swapped = metric_params({"order.classes": ["failure", "verdict", "correctness", "cost", "generic", "recording"]})
    findings = [_f("CF001", "config", order="correctness"), _f("CM001", "communication", cost=0.12)]
    assert [f.rule for f in sorted(findings, key=lambda f: _order(f, "CM001", ORDER))] == ["CF001", "CM001"]
    assert [f.rule for f in sorted(findings, key=lambda f: _order(f, "CM001", swapped["order"]))] == ["CM001", "CF001"]


def test_builtin_rules_declare_their_mechanism():
    rules = build_ruleset().rules
    assert rules["CF001"].order == rules["CF002"].order == "correctness"
    assert rules["CP001"].order == "generic" and rules["IM004"].order == "recording"
    fl001 = [f.title.render(lambda n: None)[0] for f in rules["FL001"].fixes if f.leads_if is not None]
    assert fl001 == ["Never skip a batch on one rank only"]


# ------------------------------------------------------------------ the card


def _fd(rule, category, title, fixes, cost=None, **kw):
    return {
        "rule": rule,
        "category": category,
        "title": title,
        "summary": f"{rule} summary",
        "ranks": [0, 1],
        "cost": cost,
        "evidence": kw.pop("evidence", {}),
        "fixes": fixes,
        "severity": "high",
        "expected_speedup": None if cost is None else 1 / (1 - cost),
        **kw,
    }


def _fix(title, change="x = 1", knob=None, value=None):
    return {"title": title, "change": change, "kind": "code", "knob": knob, "value": value, "not_recorded": []}


def _doc(findings, verdict_rule, bottleneck, facts=None):
    doc = {
        "schema": "ddpdoctor.diagnosis/1",
        "inputs": ["runs/a"],
        "partial": False,
        "warnings": [],
        "verdict": {
            "bottleneck": bottleneck,
            "label": f"{bottleneck}-bound",
            "confidence": 0.8,
            "confidence_label": "high",
            "expected_speedup": None,
            "rule": verdict_rule,
            "failed": False,
            "summary": "s",
            "confidence_hints": [],
        },
        "costs": [],
        "findings": findings,
        "facts": {"run.command": "torchrun --nproc_per_node=2 t.py", **(facts or {})},
    }
    return predict.annotate(doc)  # as report/json_report.to_dict builds it


def test_a_correctness_bug_leads_the_card_before_a_generic_verdict():
    """no_distributed_sampler: the verdict is compute-bound, but the first fix is the missing sampler,
    not 'Compile the model', which stays the verdict without being listed again."""
    cf = _fd("CF001", "config", "The DataLoader has no DistributedSampler", [_fix("Shard the data")])
    cp = _fd("CP001", "compute", "The step is spent computing", [_fix("Compile the model")])
    text = "\n".join(render_card(_doc([cf, cp], "CP001", "compute")))
    assert "Fix first [CF001]: Shard the data\n  (The DataLoader has no DistributedSampler)" in text
    assert "Compile the model" not in text and "Also found" not in text


def test_a_long_fix_is_cut_only_by_whole_trailing_items():
    change = "\n".join(
        [
            "The reason, in one paragraph that wraps over two lines of the card because it is long enough to.",
            "- The bullet the evidence selected, which matters most, and is also long enough to wrap once.",
            "- A second bullet.",
            "- A third bullet that is long enough to wrap over two lines at eighty columns of the card.",
            "- A fourth.",
        ]
    )
    whole = fix_body(change, 80, max_lines=20)
    assert len(whole) == 8 and not any("…" in ln for ln in whole)
    cut = fix_body(change, 80, max_lines=6)
    assert cut[:5] == whole[:5] and cut[5] == "  … 2 more items: -v or the report"
    # the first item is always whole, even past the limit
    assert fix_body(change, 80, max_lines=1)[:2] == whole[:2]


def test_a_fix_predicted_at_no_gain_never_leads_and_the_card_says_it_will_not_help():
    """comm_heavy on one CPU per rank (issue 41 item 2): smaller buckets are predicted at 1.00x (no core to
    overlap on) and a 16-bit hook too (on CPU it measured 1.38x slower). Neither leads: the card leads with the
    change that addresses the mechanism (accumulation under no_sync()), says plainly that the two will not help,
    and sends nobody to --try them. On a GPU a 16-bit hook halves the exposed transfer and is worth a trial."""
    ev = {"grad_mb": 51.0, "colls": 1, "buckets": 1, "all_transfer_share": 0.30}
    one_core = {"run.device": "cpu", "host.cpus_per_local_rank": 1.0}
    buckets = _fix("Use smaller gradient buckets", knob="ddp.bucket_cap_mb", value="9")
    hook = _fix("Compress gradients to 16 bits", knob="ddp.comm_hook", value="fp16_compress_hook")
    accumulate = _fix("Accumulate gradients locally and synchronize every N micro-batches", "+ with model.no_sync():")
    cm = _fd(
        "CM001", "communication", "Gradient communication is not hidden", [buckets, hook, accumulate], 0.35, evidence=ev
    )
    doc = _doc([cm], "CM001", "communication", one_core)
    fixes = doc["findings"][0]["fixes"]
    # the prediction is stored in the document, and the order with it: report.json and the card agree
    assert [f["title"][:10] for f in fixes] == ["Accumulate", "Use smalle", "Compress g"]
    assert [f.get("predicted_speedup") for f in fixes] == [None, 1.0, 1.0]
    text = "\n".join(render_card(doc))
    flat = " ".join(text.split())
    assert "Fix first [CM001]: Accumulate gradients locally" in text
    assert "Will not help here: ddp.bucket_cap_mb=9, predicted at 1.00x (smaller buckets pay off by" in flat
    assert "ddp.comm_hook=fp16_compress_hook, 1.00x." in flat
    assert "ddpdoctor run --try" not in text and "--report report-a" in text
    # a finding whose only fix is predicted at no gain gives no "Fix first" at all, only the plain warning
    alone = _fd("CM001", "communication", "Gradient communication is not hidden", [dict(buckets)], 0.35, evidence=ev)
    text = "\n".join(render_card(_doc([alone], "CM001", "communication", one_core)))
    assert "Fix first" not in text and "Will not help here: ddp.bucket_cap_mb=9" in text
    assert "ddpdoctor run --try" not in text
    gpu = _fd("CM001", "communication", "Gradient communication is not hidden", [dict(hook)], 0.35, evidence=ev)
    text = "\n".join(
        render_card(_doc([gpu], "CM001", "communication", {"run.device": "gpu", "host.cpus_per_local_rank": 8}))
    )
    assert "Fix first [CM001]: Compress gradients to 16 bits" in text and "Will not help" not in text
    assert "Next: ddpdoctor run --try CM001 -- torchrun --nproc_per_node=2 t.py" in text
    assert "(predicted: up to 1.18x)" in text  # half of the 30 % exposed transfer


def test_after_the_fix_commands_are_never_broken_across_lines():
    long_input = "runs/" + "a-rather-long-experiment-folder-name-" * 3
    fix = _fix("Shard the data")
    d = dict(_doc([_fd("CF001", "config", "No sampler", [fix])], None, None), inputs=[long_input])
    lines = render_card(d)
    i = next(n for n, ln in enumerate(lines) if ln.strip().startswith("ddpdoctor compare"))
    # the command is continued with a shell backslash, so it pastes whole
    assert lines[i].endswith(" \\") and all(len(ln) <= 80 for ln in lines if "compare" in ln)
    assert not any("`" in ln for ln in lines[i - 2 :])


def test_report_folder_is_named_after_the_input():
    from ddpdoctor.report.card import report_name

    assert report_name(["runs/exp3/"]) == "report-exp3"
    assert report_name(["traces/rank0.pt.trace.json.gz", "x"]) == "report-rank0"
    assert report_name(["my run (2)"]) == "report-my-run-2"
    assert report_name([]) == "ddpdoctor-report"


def test_compression_and_bucket_predictions_read_the_document():
    ev = {"grad_mb": 51.0, "colls": 1, "buckets": 1, "all_transfer_share": 0.30}
    doc = {
        "findings": [
            _fd("CM001", "communication", "t", [_fix("f", knob="ddp.comm_hook", value="fp16")], cost=0.2, evidence=ev)
        ],
        "facts": {"run.device": "gpu", "host.cpus_per_local_rank": 8},
    }
    # with cores to spare only the exposed part (the cost, 20 %) is at stake: half of it
    assert predict.predict({"ddp.comm_hook": "fp16"}, doc)["predicted_speedup"] == pytest.approx(1 / 0.9, abs=1e-3)
    assert predict.predict({"ddp.comm_hook": "powersgd:1"}, doc)["predicted_speedup"] == pytest.approx(1.25, abs=1e-3)
    assert predict.predict({"ddp.bucket_cap_mb": 9}, doc)["predicted_speedup"] == pytest.approx(1.25, abs=1e-3)
    assert predict.fix_prediction(doc, _fix("code only")) is None


def test_the_hook_name_a_fix_writes_is_a_change_run_can_apply():
    from ddpdoctor.capture.agent.overrides import parse_change

    assert parse_change("ddp.comm_hook=fp16_compress_hook") == ("ddp.comm_hook", "fp16")
    assert parse_change("ddp.comm_hook=bf16_compress_hook") == ("ddp.comm_hook", "bf16")


def test_an_interval_that_holds_one_reads_no_measurable_change():
    s = summary_line({"measured_speedup": 0.99, "ci95": [0.94, 1.04]})
    assert s.startswith("no measurable change: 0.99x (95 % 0.94–1.04") and "slower" not in s
    assert summary_line({"measured_speedup": 0.9, "ci95": [0.85, 0.95]}).startswith("measured 1.11x slower")
    assert summary_line({"measured_speedup": 1.3, "ci95": [1.2, 1.4]}).startswith("measured 1.30x faster")


def test_the_oom_sample_leads_with_never_skipping_a_batch():
    """The script caught the OOM on rank 1 and went on (its events log a step after the OOM): the hang
    comes from the skipped batch, so that fix leads, before lowering the memory."""
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(SAMPLES / "capture_gloo_2ranks_oom_skip_batch")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 3, res.stderr
    assert "Fix first [FL001]: Never skip a batch on one rank only" in res.stdout
