"""A rule whose cost is a lower bound (cost_is = "lower_bound") is said "at least" in every output, never "up to"."""

import json
import subprocess
import sys
from pathlib import Path

from ddpdoctor.report.card import render_card
from ddpdoctor.report.html import render_html
from ddpdoctor.report.markdown import finding_block, verdict_section
from ddpdoctor.rules_engine.registry import build_ruleset

ROOT = Path(__file__).resolve().parents[1]


def _doc(tmp_path) -> dict:
    out = tmp_path / "d.json"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "analyze",
            str(ROOT / "sample_traces" / "synthetic_gpu_4ranks_dataloader_bound"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(out.read_text())


def test_lower_bound_costs_read_at_least(tmp_path):
    d = _doc(tmp_path)
    v, top = d["verdict"], d["findings"][0]
    assert v["expected_speedup"] and top.get("expected_speedup") and not v["speedup_is_lower_bound"]
    before = "\n".join(render_card(d)) + verdict_section(d) + finding_block(1, top) + render_html(d)
    assert "up to" in before and "at least" not in before
    v["speedup_is_lower_bound"] = top["speedup_is_lower_bound"] = True
    # the verdict's summary says it from the analysis (rules_engine/verdict.py); the renderers' own lines here
    v["summary"] = "dataloader-bound: DataLoader wait is 30 % of the step."
    after = "\n".join(render_card(d)) + verdict_section(d) + finding_block(1, top)
    assert "at least" in after and f"up to {v['expected_speedup']:.2f}x" not in after
    html = render_html(d)
    assert f"at least {v['expected_speedup']:.2f}x" in html and f"up to {v['expected_speedup']:.2f}x" not in html


def test_the_rule_declares_it():
    rules = build_ruleset(use_config=False).rules
    assert rules["CP004"].cost_is == "lower_bound" and rules["CP001"].cost_is == "measured"
