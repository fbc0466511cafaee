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
# the rules whose templates became variants (issue #13); rules/failure/* are converted after #11
RULES = ("CM001", "CP001", "CP002", "DL001", "IM001", "IM002", "IM003", "IM004")
# rules/failure/*: every fix is pinned (their titles held ternaries too), on the stored cases, on
# each stored firing case with one fact changed (FUZZ), and on the log corpora
FAILURE_RULES = tuple(f"FL{i:03d}" for i in range(1, 16)) + ("FL017",) + tuple(f"NET{i:03d}" for i in range(1, 6))
LOGS = (ROOT / "tests" / "real_logs", ROOT / "tests" / "data" / "failure_formats")


# the fixes whose change became parts (by the start of their title)
CONVERTED_FIXES = ("Only ", "Let gradients live in the buckets", "Use a larger batch per GPU")


def _finding(f) -> dict | None:
    """What the conversion touched: the summary, and the changes of the converted fixes (so that
    later edits to other fixes of these rules do not need a new golden file)."""
    if f is None:
        return None
    every = getattr(f, "rule", None) in FAILURE_RULES
    return {"summary": f.summary,
            "fixes": [{"title": x.title, "change": x.change, "not_recorded": x.not_recorded}
                      for x in f.fixes if every or x.title.startswith(CONVERTED_FIXES)]}


# values a failure rule's template facts take besides those of its stored cases (each stored firing
# case is rendered again with one of its template facts removed or set to another value)
FUZZ = {
    "failure.network.problem": ["ifname_missing", "no_interface", "subnet", "bind", "ib", "p2p", "p2p_suspected",
                                "bad_interface", "loopback", "bootstrap", "system", "connect"],
    "failure.network.backend": ["gloo", "nccl"],
    "failure.network.ifname_form": ["name", "exclusion", "address"],
    "failure.network.remote": ["10.0.0.2<1234>", "127.0.1.1"],
    "failure.network.ib_error": [12, None],
    "failure.network.ranks": [[], [2], [0, 1, 2]],
    "failure.network.interfaces": [[], ["eth0", "ib0"]],
    "failure.network.suggested_gloo_ifname": ["eth0", None],
    "failure.root_cause.kind": ["killed", "crash", "oom"],
    "failure.remote_error.cause": ["process_exited", "network", "unknown", None],
    "failure.symptom_ranks": [[], [1], [1, 2]],
    "failure.exit.usage": ["unrecognized arguments: --local-rank=0", None],
    "failure.exit.signal": ["SIGKILL", None],
    "failure.exit.ranks": [[], [3], [0, 1]],
    "failure.rendezvous.expected": [4, None],
    "failure.rendezvous.addr": ["10.1.1.1", None],
    "nccl.ib_present": [True, False],
    "nccl.gdr": [True, False],
    "nccl.ib_devices": [[], ["mlx5_0"]],
    "nccl.socket_ifnames": [[], ["eth0"]],
    "failure.root_cause.rank": [None, 1],
    "failure.timeout.silent_ranks": [[], [2, 3]],
    "failure.remote_error.peer_rank": [3, None],
    "failure.flight_recorder.behind_rank": [None, 1],
    "failure.flight_recorder.mismatch_seq": [17, None],
    "failure.flight_recorder.mismatch_ranks": [[0, 1]],
    "failure.flight_recorder.mismatch_aspects": [["op", "shape"]],
    "failure.flight_recorder.missing_ranks": [[], [3]],
    "failure.hang.waiting_ranks": [[0], [0, 2]],
}


def _fuzzed(rule, case_facts) -> list[tuple]:
    """Each stored case the rule fires on, with one fact its texts read removed, or set to a value
    another case has (or FUZZ gives), or negated (booleans)."""
    names = set(rule.summary.names)
    for fx in rule.fixes:
        names |= set(fx.title.names) | set(fx.change.names)
    for e in list(names):
        if e in rule.evidence:
            names |= set(rule.evidence[e].names)
    names = sorted(n for n in names if "." in n and not n.startswith(("metrics.", "match.")))
    seen: dict[str, list] = {}
    for c in rule.tests:
        for k, v in c.facts.items():
            if v not in seen.setdefault(k, []):
                seen[k].append(v)
    out = []
    for c in rule.tests:
        if c.expect != "fire":
            continue
        base = case_facts(c)
        for n in names:
            if n in c.facts:
                out.append((f"{c.name} / without {n}", c, {k: v for k, v in base.items() if k != n}))
            values = [v for v in seen.get(n, []) + FUZZ.get(n, []) if v != c.facts.get(n, "\0")]
            if isinstance(c.facts.get(n), bool):
                values.append(not c.facts[n])
            done = []
            for v in values:
                if v in done:
                    continue
                done.append(v)
                facts = dict(base)
                facts[n] = v
                out.append((f"{c.name} / {n} = {v!r}", c, facts))
    return out


def render_cases() -> dict:
    rs = build_ruleset(use_config=False)
    out = {}
    for rid in RULES + FAILURE_RULES:
        rule = rs.rules[rid]
        for case in rule.tests:
            o = evaluate(rule, case_facts(case), case.params, _log_search(case) if rule.log_patterns else None)
            out[f"{rid} / {case.name}"] = {"status": o.status, "finding": _finding(o.finding)}
        if rid in FAILURE_RULES:
            for name, case, facts in _fuzzed(rule, case_facts):
                try:
                    o = evaluate(rule, facts, case.params, _log_search(case) if rule.log_patterns else None)
                    out[f"{rid} / {name}"] = {"status": o.status, "finding": _finding(o.finding)}
                except Exception as exc:  # noqa: BLE001 - an error is a rendering too: it must stay the same
                    out[f"{rid} / {name}"] = {"error": type(exc).__name__}
    return out


def _inputs() -> list[tuple[str, Path]]:
    found = [(f"sample_traces/{p.name}", p) for p in sorted((ROOT / "sample_traces").iterdir()) if p.is_dir()]
    found += [(f"logs/{d.name}/{p.name}", p) for d in LOGS for p in sorted(d.iterdir())
              if p.suffix == ".log" or (p.is_dir() and any(f.suffix == ".log" for f in p.iterdir()))]
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
        out[key] = _portable({f.rule: _finding(f) for f in report.diagnosis.findings if f.rule in RULES + FAILURE_RULES})
    return out


def _portable(rendered: dict) -> dict:
    """A fix that cites a log file names it by its absolute path: store it relative to the checkout (and
    to the real-trace folder), so the golden holds in any clone, CI's included."""
    text = json.dumps(rendered, ensure_ascii=False)
    for where, name in ((REAL.resolve(), "<real_traces>"), (ROOT, "<checkout>")):
        text = text.replace(json.dumps(str(where))[1:-1], name)
    return json.loads(text)


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


def test_rule_test_cases_render_as_before(golden):
    now = render_cases()
    assert set(now) == set(golden["cases"])
    for key, was in golden["cases"].items():
        assert now[key] == was, key


def test_sample_and_real_traces_render_as_before(golden):
    keys = [k for k in golden["inputs"] if not k.startswith("real_traces/") or REAL.is_dir()]
    now = render_inputs(set(keys))
    assert now, "no inputs rendered"
    for key in keys:
        assert now[key] == golden["inputs"][key], key
    assert any(golden["inputs"][k] for k in keys), "no converted rule fired on any input: the check proves nothing"


# ------------------------------------------------------------------ old ternary == new variants, branch by branch

OLD = ROOT / "tests" / "data" / "ternary_templates.toml"
# facts that take each variant the stored cases and traces do not reach
EXTRA = {
    "CM001": [{"config.ddp.find_unused_parameters": True, "memory.peak_bytes": 30e9, "memory.capacity_bytes": 80e9,
               "config.fsdp.kind": "fsdp1", "config.fsdp.sharding_strategy": "FULL_SHARD"},
              {"config.ddp.find_unused_parameters": False}, {}],
    "IM004": [{"host.contention.steal_share": 0.12, "host.contention.involuntary_switches_per_s": 812.4,
               "host.contention.other_busy_share": 0.4, "host.contention.cpus_per_rank": 1.5,
               "host.contention.threads_per_cpu": 2.0}, {"host.contention.steal_share": 0.0}],
    "IM001": [{"straggler.count": 1, "straggler.ranks": [2], "straggler.rank": 2, "straggler.late_us": 900.0,
               "straggler.late_share": 0.2, "straggler.steps_late": 3, "straggler.steps": 4}],
    "DL001": [{"host.cpus_per_local_rank": 2.0, "run.device": "gpu", "config.dataloader.num_workers": 0},
              {"host.cpus_per_local_rank": 2.0, "run.device": "cpu"}],
    "CP001": [{"run.device": "cpu"}, {"run.device": "gpu", "rank.share.gpu_busy": "per-rank 0.9"}],
    "IM003": [{"host.cpus_per_local_rank": 4.0}, {"host.cpus_per_local_rank": 32}],
    "IM002": [{"cross.input_shapes": "varying", "cross.input_shape_count": 3,
               "cross.input_shape_examples": ["[[8, 128]]", "[[8, 512]]"]}],
}


def _with(facts: dict, extra: dict) -> dict:
    """facts + extra; "per-rank X" is X on every rank the facts have."""
    import numpy as np

    from ddpdoctor.rules_engine.expr import Vec

    out = dict(facts)
    ranks = next((v.ranks for v in facts.values() if isinstance(v, Vec)), np.asarray([0, 1]))
    for k, v in extra.items():
        out[k] = Vec(np.full(len(ranks), float(v.split()[1])), ranks) if isinstance(v, str) and v.startswith("per-rank ") else v
    return out


# facts added after the conversion: a case holding them renders parts the ternaries never had
# (IM001 on GC pauses / a GIL-held call, issue #25 item 1)
NEWER_FACTS = ("python.gc.", "python.gil_held.")


def _fact_sets(rule):
    from ddpdoctor.rules_engine.selftest import case_facts as cf

    sets = [f for f in (cf(c) for c in rule.tests) if not any(k.startswith(NEWER_FACTS) for k in f)]
    for extra in EXTRA.get(rule.id, []):
        sets += [_with(f, extra) for f in sets[:3]] + [_with({}, extra)]
    return sets


# rules whose text was rewritten since (not a conversion any more): IM004 fires only on measured
# contention and quotes what was measured (issue #25 item 2), its advice changed (issue #27 item 4)
REWRITTEN = ("IM004",)


@pytest.mark.parametrize("rid", [r for r in RULES if r not in REWRITTEN])
def test_variants_render_what_the_ternaries_rendered(rid):
    """On every fact set where the rule fires (stored cases, and each with the EXTRA facts that
    reach the other variants): the same text and the same not-recorded names."""
    import tomllib

    from ddpdoctor.rules_engine.engine import _Lookup
    from ddpdoctor.rules_engine.expr import ExprError
    from ddpdoctor.rules_engine.template import VariantTemplate, compile_template

    old = tomllib.loads(OLD.read_text(encoding="utf-8"))[rid]
    rule = build_ruleset(use_config=False).rules[rid]
    pairs = [(compile_template(old["summary"]), rule.summary)]
    for fx in old.get("fix", []):
        new = [f for f in rule.fixes if f.title.source == fx["title"]]
        assert len(new) == 1, fx["title"]
        pairs.append((compile_template(fx["change"]), new[0].change))
    assert any(isinstance(new, VariantTemplate) for _, new in pairs)
    compared = 0
    for facts in _fact_sets(rule):
        look = _Lookup(facts, rule.param_values(), None)
        try:
            for name, e in rule.evidence.items():
                look.values[name] = e(look)
            if rule.when(look) is not True:       # a summary is rendered only when the rule fires
                continue
        except (ExprError, TypeError, ValueError):
            continue
        for before, after in pairs:
            try:
                want = before.render(look)
            except (ExprError, TypeError, ValueError) as exc:
                with pytest.raises(type(exc)):
                    after.render(look)
                continue
            assert after.render(look) == want, (rid, facts)
            compared += 1
    assert compared >= len(pairs) * 3


if __name__ == "__main__" and "--regenerate" in sys.argv:
    GOLDEN.write_text(json.dumps({"cases": render_cases(), "inputs": render_inputs()}, indent=1, sort_keys=True,
                                 ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")


def test_a_missing_value_in_parentheses_is_not_doubled():
    from ddpdoctor.rules_engine.template import NOT_RECORDED, _tidy

    assert _tidy(f"num_workers ({NOT_RECORDED}) now") == f"num_workers {NOT_RECORDED} now"
    assert _tidy(f"(num_workers={NOT_RECORDED} now)") == f"(num_workers={NOT_RECORDED} now)"


def test_a_conditional_part_missing_a_value_reads_not_recorded_as_a_whole():
    """As ``{' at ' + x if cond else ''}`` did; plain text shows the missing value in place."""
    from ddpdoctor.rules_engine.expr import compile_expr
    from ddpdoctor.rules_engine.template import NOT_RECORDED, Variant, VariantTemplate, compile_template

    def look(name):
        from ddpdoctor.rules_engine.expr import Missing
        return {"c": True}.get(name, Missing(frozenset([name])))

    t = VariantTemplate([[Variant(None, compile_template("Rank 1"))],
                         [Variant(compile_expr("c"), compile_template(" at {x}"))],
                         [Variant(None, compile_template(", step {y}"))]])
    assert t.render(look) == (f"Rank 1{NOT_RECORDED}, step {NOT_RECORDED}", {"x", "y"})
