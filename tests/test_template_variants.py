"""Summary and fix templates whose text was a program (nested ternaries, long expressions)
became variants chosen by their own conditions ([[summary]] / [[fix.change]] parts): the
rendered text must stay what it was.  tests/data/template_render_golden.json holds the
findings these rules rendered, on their stored test cases and on the sample (and real) traces,
with the ternary templates, before the change; regenerate it only for an intended text change:
    python tests/test_template_variants.py --regenerate
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ddpdoctor.analysis import AnalyzeOptions  # noqa: E402
from ddpdoctor.diagnosis import run_analyze  # noqa: E402
from ddpdoctor.rules_engine.engine import evaluate  # noqa: E402
from ddpdoctor.rules_engine.registry import build_ruleset  # noqa: E402
from ddpdoctor.rules_engine.selftest import _log_search, case_facts  # noqa: E402

GOLDEN = ROOT / "tests" / "data" / "template_render_golden.json"
REAL = Path(os.environ.get("DDPDOCTOR_REAL_TRACES", ROOT.parent / "shared" / "real_traces"))
# the rules whose templates became variants (issue #13); rules/failures/* are converted after #11
RULES = ("CM001", "CP001", "CP002", "DL001", "IM001", "IM002", "IM003", "IM004")


def _finding(f) -> dict | None:
    if f is None:
        return None
    return {"summary": f.summary, "not_recorded": f.not_recorded,
            "fixes": [{"title": x.title, "change": x.change, "value": x.value, "not_recorded": x.not_recorded}
                      for x in f.fixes]}


def render_cases() -> dict:
    rs = build_ruleset(use_config=False)
    out = {}
    for rid in RULES:
        rule = rs.rules[rid]
        for case in rule.tests:
            o = evaluate(rule, case_facts(case), case.params, _log_search(case) if rule.log_patterns else None)
            out[f"{rid} / {case.name}"] = {"status": o.status, "finding": _finding(o.finding)}
    return out


def _inputs() -> list[tuple[str, Path]]:
    found = [(f"sample_traces/{p.name}", p) for p in sorted((ROOT / "sample_traces").iterdir()) if p.is_dir()]
    if REAL.is_dir():
        found += [(f"real_traces/{p.name}", p) for p in sorted(REAL.iterdir())
                  if p.is_dir() and any(p.rglob("*.json*"))]
    return found


def render_inputs(keys=None) -> dict:
    rs = build_ruleset(use_config=False)
    out = {}
    for key, path in _inputs():
        if keys is not None and key not in keys:
            continue
        report = run_analyze([str(path)], AnalyzeOptions(), rs)
        out[key] = {f.rule: _finding(f) for f in report.diagnosis.findings if f.rule in RULES}
    return out


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


def test_rule_test_cases_render_as_before(golden):
    now = render_cases()
    assert set(now) == set(golden["cases"])
    for key, was in golden["cases"].items():
        assert now[key] == was, key


def test_sample_and_real_traces_render_as_before(golden):
    keys = [k for k in golden["inputs"] if k.startswith("sample_traces/") or REAL.is_dir()]
    now = render_inputs(set(keys))
    assert now, "no inputs rendered"
    for key in keys:
        assert now[key] == golden["inputs"][key], key
    assert any(golden["inputs"][k] for k in keys), "no converted rule fired on any input: the check proves nothing"


if __name__ == "__main__" and "--regenerate" in sys.argv:
    GOLDEN.write_text(json.dumps({"cases": render_cases(), "inputs": render_inputs()}, indent=1, sort_keys=True,
                                 ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")
