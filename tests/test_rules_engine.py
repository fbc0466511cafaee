"""The rule engine: every stored rule case, the expression language's safety, templates,
rule-file errors with file and line, and overrides."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ddpdoctor.errors import InputError
from ddpdoctor.expr import ExprError, Missing, Vec, compile_expr
from ddpdoctor.resources import rules_dir
from ddpdoctor.rules_engine.engine import evaluate
from ddpdoctor.rules_engine.model import RuleError, load_rule_file
from ddpdoctor.rules_engine.registry import build_ruleset, load_rules
from ddpdoctor.rules_engine.selftest import case_facts, run_case
from ddpdoctor.template import compile_template

BUILTIN = load_rules()
CASES = [(r, c) for r in BUILTIN.active() for c in r.tests]


@pytest.mark.parametrize("rule,case", CASES, ids=[f"{r.id}-{c.name}" for r, c in CASES])
def test_stored_rule_case(rule, case):
    assert run_case(rule, case) == []


@pytest.mark.parametrize("rule", BUILTIN.active(), ids=lambda r: r.id)
def test_every_rule_has_firing_and_quiet_cases_and_one_at_each_threshold(rule):
    expects = {c.expect for c in rule.tests}
    assert {"fire", "quiet"} <= expects, rule.id
    thresholds = [p for p in rule.params if p in rule.when.source]
    if thresholds:
        assert any("exactly at the threshold" in c.name for c in rule.tests), rule.id
    assert rule.why and rule.references and rule.fixes, rule.id


def _lookup(facts):
    return lambda n: facts.get(n, Missing(frozenset({n})))


@pytest.mark.parametrize(
    "source",
    [
        "__import__('os').system('true')",
        "().__class__",
        "(lambda: 1)()",
        "[x for x in y]",
        "a[0]",
        "open('/etc/passwd')",
        "f(x).y",
        "a.b(1)",
        "a if b else c.__dict__()",
        "x := 1",
        "{'a': 1}",
        "b'bytes'",
        "print(1)",
        "eval('1')",
        "getattr(a, 'b')",
    ],
)
def test_expressions_outside_the_whitelist_are_refused(source):
    with pytest.raises(ExprError):
        compile_expr(source)


def test_three_valued_logic_and_per_rank_values():
    v = Vec(np.array([0.1, 0.3, 0.2]), np.array([4, 5, 6]))
    f = {"rank.share.x": v, "a": 2}
    ev = lambda s: compile_expr(s)(_lookup(f))  # noqa: E731
    assert ev("median(rank.share.x)") == pytest.approx(0.2)
    assert ev("argmax(rank.share.x)") == 5 and ev("argmin(rank.share.x)") == 4
    assert ev("ranks_where(rank.share.x >= 0.2)") == [5, 6]
    assert ev("frac(rank.share.x > 0.15)") == pytest.approx(2 / 3)
    assert ev("count(rank.share.x * 2 > 0.5)") == 1
    assert isinstance(ev("missing > 1 and a > 1"), Missing)
    assert ev("missing > 1 and a > 5") is False  # False wins over unknown
    assert ev("missing > 1 or a > 1") is True  # True wins over unknown
    assert ev("known(missing)") is False and ev("default(missing, 3) * 2") == 6
    assert ev("'x' in ['x', 'y'] and 'Dist' not in 'RandomSampler'") is True
    assert ev("none == None and true") is True
    m = ev("median(rank.share.gpu) > 1")
    assert isinstance(m, Missing) and m.names == {"rank.share.gpu"}


def test_all_nan_values_are_missing_not_zero():
    f = {"rank.share.host_idle": Vec(np.array([np.nan, np.nan]), np.array([0, 1]))}
    out = compile_expr("median(rank.share.host_idle) >= 0.1")(_lookup(f))
    assert isinstance(out, Missing) and out.names == {"rank.share.host_idle"}


def test_templates_format_values_and_mark_what_was_not_recorded():
    t = compile_template("wait {pct(w)} ({w:.1%}), workers={config.dataloader.num_workers}, {{literal}}, {human_us(u)}")
    text, missing = t.render(_lookup({"w": 0.314, "u": 1450.0, "config.dataloader.num_workers": 4}))
    assert text == "wait 31 % (31.4%), workers=4, {literal}, 1.4 ms" and missing == set()
    # a value the run did not record (absent, None or NaN) has no stand-in: the text is not said, the names are given
    for facts in ({}, {"config.dataloader.num_workers": None}, {"config.dataloader.num_workers": float("nan")}):
        text, missing = t.render(_lookup({"w": 0.314, "u": 1450.0, **facts}))
        assert text is None and missing == {"config.dataloader.num_workers"}, (facts, text)
    with pytest.raises(ExprError):
        compile_template("unbalanced {x")
    with pytest.raises(ExprError):
        compile_template("{x.__class__()}")


RULE = """\
id = "US001"
name = "user.slow_thing"
category = "dataloader"
severity = "high"
title = "A user rule"
when = "median(rank.share.dataloader_wait) >= limit"
cost = "median(rank.share.dataloader_wait)"
summary = "user rule fired at {pct(median(rank.share.dataloader_wait))} (limit {pct(limit)})"
why = "because"
references = ["https://example.org"]

[params]
limit = { default = 0.5, help = "a limit" }

[[fix]]
title = "do it"
change = "x = {limit}"

[[test]]
name = "fires"
expect = "fire"
[test.facts]
"rank.share.dataloader_wait" = [0.6]
"""


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "mutation,line,message",
    [
        (lambda s: s.replace('severity = "high"', 'severity = "urgent"'), 4, "severity 'urgent'"),
        (
            lambda s: s.replace('when = "median(rank.share.dataloader_wait) >= limit"', 'when = "limit >= ("'),
            6,
            "syntax error",
        ),
        (
            lambda s: s.replace('when = "median(rank.share.dataloader_wait) >= limit"', "when = \"os.system('x')\""),
            6,
            "unknown function",
        ),
        (
            lambda s: s.replace('when = "median(rank.share.dataloader_wait) >= limit"', 'when = "limt > 1"'),
            6,
            "unknown name 'limt'",
        ),
        (lambda s: s.replace('title = "A user rule"', 'title = "A user rule\n'), 5, "not valid TOML"),
        (lambda s: s.replace('id = "US001"', 'id = "us-1"'), 1, "must be 2-4 capital letters"),
        (lambda s: s.replace('why = "because"', 'why = "because"\ncolour = "red"'), 10, "unknown key 'colour'"),
        (lambda s: s.replace('change = "x = {limit}"', 'change = "x = {limit"'), 17, "unbalanced brace"),
    ],
)
def test_a_malformed_rule_names_file_and_line(tmp_path, mutation, line, message):
    p = _write(tmp_path, "US001.toml", mutation(RULE))
    with pytest.raises(RuleError) as exc:
        load_rule_file(p)
    assert str(exc.value).startswith(f"{p}:{line}: "), str(exc.value)
    assert message in str(exc.value)


def test_user_rules_add_and_override_and_settings_change_the_result(tmp_path):
    user = tmp_path / "myrules"
    _write(user, "US001.toml", RULE)
    dl001 = Path(BUILTIN.rules["DL001"].path).read_text()
    _write(user, "DL001.toml", dl001.replace("default = 0.10", "default = 0.40", 1))
    rs = build_ruleset([str(user)], use_config=False)
    assert rs.rules["US001"].origin == "user" and rs.rules["DL001"].params["min_wait_share"].default == 0.40
    assert any("DL001 replaced" in n for n in rs.notes)
    facts = case_facts(BUILTIN.rules["DL001"].tests[0])  # DataLoader wait ~31 %
    assert evaluate(BUILTIN.rules["DL001"], facts).status == "fire"
    assert evaluate(rs.rules["DL001"], facts).status == "quiet"  # threshold raised to 40 %
    rs2 = build_ruleset([str(user)], ["US001.limit=0.2", "DL001.min_wait_share=0.3"], use_config=False)
    out = evaluate(rs2.rules["US001"], facts, rs2.params["US001"])
    assert out.status == "fire" and "limit 20 %" in out.finding.summary
    assert evaluate(rs2.rules["DL001"], facts, rs2.params["DL001"]).status == "fire"


@pytest.mark.parametrize(
    "setting,message",
    [
        ("DL001.nope=1", "has no param 'nope'"),
        ("XX999.a=1", "no rule 'XX999'"),
        ("DL001.min_wait_share=abc", "must be a number"),
        ("DL001", "must be RULE.param=value"),
    ],
)
def test_bad_settings_are_clear_errors(setting, message):
    with pytest.raises(InputError, match=re.escape(message)):
        build_ruleset(sets=[setting], use_config=False)


def test_pyproject_and_ddpdoctor_toml_settings(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent("""
        [project]
        name = "x"
        [tool.ddpdoctor]
        disable = ["CP001"]
        [tool.ddpdoctor.params.DL001]
        min_wait_share = 0.25
    """)
    )
    rs = build_ruleset(config_start=tmp_path)
    assert rs.params["DL001"]["min_wait_share"] == 0.25 and "CP001" in rs.disabled
    (tmp_path / "ddpdoctor.toml").write_text('[params]\n"DL001.min_wait_share" = 0.35\n')
    rs = build_ruleset(config_start=tmp_path)  # ddpdoctor.toml comes after pyproject.toml
    assert rs.params["DL001"]["min_wait_share"] == 0.35
    rs = build_ruleset(sets=["DL001.min_wait_share=0.05"], config_start=tmp_path)  # --set wins
    assert rs.params["DL001"]["min_wait_share"] == 0.05
    (tmp_path / "ddpdoctor.toml").write_text('[params]\n"DL001.bogus" = 1\n')
    with pytest.raises(InputError, match="ddpdoctor.toml: rule DL001 has no param 'bogus'"):
        build_ruleset(config_start=tmp_path)


def test_a_rule_error_at_run_time_is_reported_not_raised(tmp_path):
    bad = RULE.replace(
        'when = "median(rank.share.dataloader_wait) >= limit"', 'when = "rank.share.dataloader_wait >= limit"'
    )
    rule = load_rule_file(_write(tmp_path, "US001.toml", bad))
    out = evaluate(rule, case_facts(rule.tests[0]))
    assert out.status == "error" and "one value per rank" in out.error


def test_rule_files_match_the_editor_schema():
    import json
    import tomllib

    import jsonschema

    from ddpdoctor.resources import rules_dir
    from ddpdoctor.rules_engine.model import TOP_KEYS

    schema = json.loads((rules_dir() / "rule.schema.json").read_text())
    assert set(schema["properties"]) == TOP_KEYS
    for rule in BUILTIN.active():
        jsonschema.validate(tomllib.loads(Path(rule.path).read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**tomllib.loads(RULE), "severity": "dire"}, schema)


def test_an_error_in_a_later_fix_names_that_fix_line(tmp_path):
    text = RULE.replace("[[test]]", '[[fix]]\ntitle = "second"\nchange = "y = {limt}"\n\n[[test]]', 1)
    p = _write(tmp_path, "US001.toml", text)
    with pytest.raises(RuleError) as exc:
        load_rule_file(p)
    line = text.splitlines().index('change = "y = {limt}"') + 1
    assert str(exc.value).startswith(f"{p}:{line}: change: unknown name 'limt'"), str(exc.value)


def test_fix_knob_and_value_are_rendered_and_checked(tmp_path):
    text = RULE.replace("[[fix]]", '[[fix]]\nknob = "dataloader.num_workers"\nvalue = "{limit * 8:.0f}"', 1)
    rule = load_rule_file(_write(tmp_path / "ok", "US001.toml", text))
    assert rule.fixes[0].knob == "dataloader.num_workers"
    out = evaluate(rule, {"rank.share.dataloader_wait": Vec(np.array([0.6]), np.array([0]))}, {})
    fix = out.finding.fixes[0]
    assert (fix.knob, fix.value) == ("dataloader.num_workers", "4")
    for bad, message in (
        ('knob = "Num Workers"\nvalue = "4"', "knob 'Num Workers'"),
        ('knob = "ddp.bucket_cap_mb"', "needs a 'value'"),
        ('value = "4"', "goes with a 'knob'"),
    ):
        p = _write(tmp_path / "bad", "US001.toml", RULE.replace("[[fix]]", "[[fix]]\n" + bad, 1))
        with pytest.raises(RuleError, match=message):
            load_rule_file(p)


# ------------------------------------------------------------------ thresholds of rules/metrics.toml as params

METRIC_SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces"


def _analyze_json(tmp_path, sample, *args):
    import json

    from click.testing import CliRunner

    from ddpdoctor.cli import main

    out = tmp_path / f"o{len(list(tmp_path.glob('o*.json')))}.json"
    res = CliRunner().invoke(main, ["analyze", str(METRIC_SAMPLE / sample), "--quiet", "--json", str(out), *args])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


@pytest.mark.slow  # three `ddpdoctor analyze` processes on 8 ranks; the in-process case is tests/test_analysis_context.py
def test_set_metrics_threshold_changes_the_straggler_and_the_finding(tmp_path):
    sample = "synthetic_gpu_8ranks_straggler_rank3"
    before = _analyze_json(tmp_path, sample, "--no-config")
    assert before["facts"]["straggler.count"] == 1 and "IM001" in [f["rule"] for f in before["findings"]]
    after = _analyze_json(tmp_path, sample, "--no-config", "--set", "metrics.straggler.min_late_share=0.9")
    assert after["facts"]["straggler.count"] == 0 and "IM001" not in [f["rule"] for f in after["findings"]]
    again = _analyze_json(tmp_path, sample, "--no-config")  # the override lasted one command
    assert again["facts"]["straggler.count"] == 1


def test_config_file_metrics_table_changes_the_verdict(tmp_path, monkeypatch):
    sample = "synthetic_gpu_4ranks_dataloader_bound"
    assert _analyze_json(tmp_path, sample, "--no-config")["verdict"]["bottleneck"] == "dataloader"
    (tmp_path / "ddpdoctor.toml").write_text("[metrics.verdict.materiality]\ndataloader = 0.95\n")
    monkeypatch.chdir(tmp_path)
    d = _analyze_json(tmp_path, sample)
    assert d["verdict"]["bottleneck"] == "compute" and "DL001" in [f["rule"] for f in d["findings"]]
    assert _analyze_json(tmp_path, sample, "--no-config")["verdict"]["bottleneck"] == "dataloader"


@pytest.mark.parametrize(
    "item, message",
    [
        ("metrics.straggler.min_late=1", "no threshold metrics.straggler.min_late (straggler has: min_late_share"),
        ("metrics.straggler.min_late_share=yes", "must be a float like its default 0.05, not 'yes'"),
        ("metrics.verdict=1", "metrics.verdict is a table"),
        ("metrics.nosuch.x=1", "no threshold metrics.nosuch.x (rules/metrics.toml has:"),
    ],
)
def test_set_metrics_bad_values_are_refused(item, message):
    with pytest.raises(InputError, match=re.escape(message)):
        build_ruleset(sets=[item], use_config=False)


def test_pyproject_metrics_dotted_keys(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ddpdoctor.metrics]\n"straggler.min_late_us" = 250.0\n')
    rs = build_ruleset(config_start=tmp_path)
    assert rs.metrics == {"straggler.min_late_us": 250.0}


def test_a_rule_reads_metrics_thresholds_and_set_changes_them(tmp_path):
    from ddpdoctor.resources import metric_params

    p = tmp_path / "XX002.toml"
    p.write_text(
        textwrap.dedent("""\
        id = "XX002"
        name = "custom.loader_material"
        category = "dataloader"
        severity = "low"
        title = "Loader wait above the verdict's materiality"
        when = "median(rank.share.dataloader_wait) >= metrics.verdict.materiality.dataloader"
        summary = "wait {pct(median(rank.share.dataloader_wait))}; materiality {pct(metrics.verdict.materiality.dataloader)}"
        """)
    )
    rule = load_rule_file(p)
    facts = {"rank.share.dataloader_wait": Vec(np.asarray([0.08, 0.08]), np.asarray([0, 1]))}
    out = evaluate(rule, facts)
    assert out.status == "fire" and "materiality 5" in out.finding.summary
    rs = build_ruleset(sets=["metrics.verdict.materiality.dataloader=0.1"], use_config=False)
    assert evaluate(rule, facts, thresholds=metric_params(rs.metrics)).status == "quiet"
    assert evaluate(rule, facts).status == "fire"  # another analysis: the shipped thresholds
    p.write_text(p.read_text().replace('materiality.dataloader"', 'materiality.dataloadr"', 1))
    with pytest.raises(RuleError, match=r":6: when: unknown threshold 'metrics.verdict.materiality.dataloadr'"):
        load_rule_file(p)


# ------------------------------------------------------------------ templates with variants

VARIANT_RULE = """id = "XX003"
name = "custom.variants"
category = "info"
severity = "info"
title = "Variants"
when = "run.steps > 0"

[[summary]]
variant = [
  { when = "run.steps > 10", text = "many steps" },
  { when = "run.steps > 2", text = "some steps" },
  { text = "few steps" },
]

[[summary]]
when = "run.device == 'gpu'"
text = " on GPU"

[[summary]]
text = ": {run.steps}"
"""


@pytest.mark.parametrize(
    "facts, text, missing",
    [
        ({"run.steps": 20, "run.device": "gpu"}, "many steps on GPU: 20", []),
        ({"run.steps": 5, "run.device": "cpu"}, "some steps: 5", []),
        ({"run.steps": 1, "run.device": "cpu"}, "few steps: 1", []),
        ({"run.steps": 1}, "few steps: 1", ["run.device"]),  # the part its when cannot decide is left out
    ],
)
def test_summary_variants_choose_by_their_own_conditions(tmp_path, facts, text, missing):
    p = tmp_path / "XX003.toml"
    p.write_text(VARIANT_RULE)
    f = evaluate(load_rule_file(p), facts).finding
    assert f.summary == text and f.not_recorded == missing


def test_a_fix_or_summary_that_needs_a_missing_value_is_not_said(tmp_path):
    """A fix whose title, change or value needs a value the run did not record is not offered; a summary of
    which nothing can be said is the rule's title; the names are in the finding's not_recorded (JSON)."""
    p = tmp_path / "XX004.toml"
    p.write_text(
        """id = "XX004"
name = "custom.missing"
category = "info"
severity = "info"
title = "Something to say"
when = "run.device == 'gpu'"
summary = "{run.steps} steps on GPU."

[[fix]]
title = "Use {run.steps} steps"
change = "steps = {run.steps}"

[[fix]]
title = "Keep the GPU"
change = "device = 'cuda'"
knob = "run.device"
value = "{run.device}"

[[fix]]
title = "Set the workers"
change = "num_workers = 2"
knob = "config.dataloader.num_workers"
value = "{config.dataloader.num_workers}"
"""
    )
    rule = load_rule_file(p)
    f = evaluate(rule, {"run.device": "gpu"}).finding
    assert f.summary == "Something to say." and [x.title for x in f.fixes] == ["Keep the GPU"]
    assert f.not_recorded == ["config.dataloader.num_workers", "run.steps"]
    f = evaluate(rule, {"run.device": "gpu", "run.steps": 3, "config.dataloader.num_workers": 2}).finding
    assert f.summary == "3 steps on GPU." and len(f.fixes) == 3 and f.not_recorded == []


@pytest.mark.parametrize(
    "edit, line, message",
    [
        (lambda s: s.replace('{ text = "few steps" }', '{ txt = "few steps" }'), 8, "each variant needs text"),
        (lambda s: s.replace('when = "run.device', 'if = "run.device'), 15, "part #2 takes text and when"),
        (lambda s: s.replace("run.steps > 2", "run.stepz > 2"), 11, "when: unknown fact 'run.stepz'"),
        (lambda s: s.replace('": {run.steps}"', '": {run.stepz}"'), 20, "text: unknown fact 'run.stepz'"),
    ],
)
def test_bad_variant_parts_name_file_and_line(tmp_path, edit, line, message):
    p = tmp_path / "XX003.toml"
    p.write_text(edit(VARIANT_RULE))
    with pytest.raises(RuleError) as exc:
        load_rule_file(p)
    assert str(exc.value).startswith(f"{p}:{line}: summary: ") and message in str(exc.value), str(exc.value)


def test_a_per_rank_variant_condition_is_an_error(tmp_path):
    p = tmp_path / "XX003.toml"
    p.write_text(VARIANT_RULE.replace('"run.steps > 10"', '"rank.step_time > 10"'))
    out = evaluate(
        load_rule_file(p), {"run.steps": 3, "rank.step_time": Vec(np.asarray([1.0, 20.0]), np.asarray([0, 1]))}
    )
    assert out.status == "error" and "one value per rank" in out.error


def test_no_rule_text_says_word_s():
    """Counts take their noun through plural() ("1 worker", "2 workers"), never "worker(s)" (#14)."""
    leaks = [
        f"{p.relative_to(rules_dir())}:{i}: {line.strip()}"
        for p in sorted(rules_dir().rglob("*.toml"))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"[a-z]\((s|es)\)", line)
        and not line.lstrip().startswith("#")
        and not (p.parent.name == "messages" and line.startswith("text = "))
    ]  # a log excerpt, quoted as logged
    assert not leaks, "\n".join(leaks)


def test_a_part_that_needs_a_missing_value_is_left_out():
    """No stand-in in place: a part (plain or conditional) whose text needs a value the run did not record adds
    nothing, and its names are reported; when nothing is left the whole is None (it cannot be said)."""
    from ddpdoctor.expr import compile_expr
    from ddpdoctor.template import Variant, VariantTemplate, compile_template

    def look(name):
        from ddpdoctor.expr import Missing

        return {"c": True}.get(name, Missing(frozenset([name])))

    t = VariantTemplate(
        [
            [Variant(None, compile_template("Rank 1"))],
            [Variant(compile_expr("c"), compile_template(" at {x}"))],
            [Variant(None, compile_template(", step {y}"))],
        ]
    )
    assert t.render(look) == ("Rank 1", {"x", "y"})
    # a when the run cannot decide leaves its part out (the later variants are written for it being false)
    undecided = VariantTemplate(
        [[Variant(compile_expr("z > 1"), compile_template("big")), Variant(None, compile_template("small"))]]
    )
    assert undecided.render(look) == (None, {"z"})
    # a fallback is a variant of its own, chosen by a condition on the missing fact
    fallback = VariantTemplate(
        [
            [
                Variant(compile_expr("not known(x)"), compile_template("Rank 1")),
                Variant(None, compile_template("Rank {x}")),
            ]
        ]
    )
    assert fallback.render(look) == ("Rank 1", set())
