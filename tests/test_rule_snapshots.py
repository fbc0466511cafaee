"""Exact rule tests: every rule's [[test]] cases render as its snapshot says (rules/<folder>/snapshots/<id>.snap,
written by `ddpdoctor rules test --update`); cases build on their folder's base facts; the layout
(folder = category = id prefix, rules/layout.toml) is checked when rules load; no rule id is quoted in the
rule engine's code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.resources import rules_dir
from ddpdoctor.rules_engine import snapshot
from ddpdoctor.rules_engine.basefacts import load_base_facts
from ddpdoctor.rules_engine.layout import check_rule, load_layout
from ddpdoctor.rules_engine.model import RuleError, load_rule_file
from ddpdoctor.rules_engine.registry import load_rules
from ddpdoctor.rules_engine.selftest import EXIT_FAILED, EXIT_PASSED, case_facts, run_all, run_rule

BUILTIN = load_rules()
ENGINE = Path(__file__).resolve().parent.parent / "ddpdoctor" / "rules_engine"

RULE = """id = "US001"
name = "user.wait"
category = "dataloader"
severity = "high"
title = "A user rule"
when = "median(rank.share.dataloader_wait) >= limit"
summary = "wait {pct(median(rank.share.dataloader_wait))} on {plural(run.ranks_analyzed, 'rank')}"
why = "because"
references = ["https://example.org"]

[params]
limit = { default = 0.5, help = "a limit" }

[[fix]]
title = "Lower the wait below {pct(limit)}"
change = "x = {limit}"

[[test]]
name = "fires"
expect = "fire"
[test.facts]
"rank.share.dataloader_wait" = [0.6, 0.7]

[[test]]
name = "quiet without the base's ranks"
expect = "quiet"
unset = ["run.ranks_analyzed"]
[test.facts]
"rank.share.dataloader_wait" = [0.1, 0.1]
"""
BASE = """null = ["config.dataloader.prefetch_factor"]
[facts]
"run.ranks_analyzed" = 2
"run.ranks" = [0, 1]
"""


@pytest.mark.parametrize("rule", BUILTIN.active(), ids=lambda r: r.id)
def test_each_rule_renders_its_snapshot(rule):
    problems, text = run_rule(rule)
    assert [p for p in problems if p[1]] == []
    assert snapshot.diff(rule, text) == [], "\n".join(snapshot.diff(rule, text)[:40])


def test_no_snapshot_is_left_without_a_rule():
    assert snapshot.orphans(BUILTIN.active(), [rules_dir()]) == []


def _user(tmp_path: Path, rule: str = RULE, base: str | None = BASE) -> tuple[Path, object]:
    folder = tmp_path / "mine"
    folder.mkdir(exist_ok=True)
    (folder / "US001.toml").write_text(rule)
    if base is not None:
        (folder / "base_facts.toml").write_text(base)
    load_base_facts.cache_clear()
    from ddpdoctor.rules_engine.registry import _load_folder

    return folder, _load_folder(folder, "user")["US001"]


def test_a_case_states_what_differs_from_its_folders_base_facts(tmp_path):
    _folder, rule = _user(tmp_path)
    fires, quiet = rule.tests
    facts = case_facts(fires)
    assert facts["run.ranks_analyzed"] == 2 and facts["config.dataloader.prefetch_factor"] is None
    assert "run.ranks_analyzed" not in case_facts(quiet)
    _problems, text = run_rule(rule)
    assert "summary: wait 65 % on 2 ranks" in text and "fix 1: Lower the wait below 50 %" in text


def test_update_writes_snapshots_and_a_changed_text_is_a_diff(tmp_path):
    folder, rule = _user(tmp_path)
    out: list[str] = []
    assert run_all([rule], [folder], False, out.append) == EXIT_PASSED  # a user rule may have none yet
    assert any("note: 1 user rule without a snapshot" in line for line in out)
    rule.origin = "built-in"
    assert run_all([rule], [folder], False, out.append) == EXIT_FAILED  # a built-in one must
    assert any("missing" in line for line in out)
    assert run_all([rule], [folder], True, out.append) == EXIT_PASSED
    snap = folder / "snapshots" / "US001.snap"
    assert "## fires\nfire\nsummary: wait 65 % on 2 ranks\nfix 1: Lower the wait below 50 %" in snap.read_text()
    out.clear()
    assert run_all([rule], [folder], False, out.append) == EXIT_PASSED
    _folder, changed = _user(tmp_path, RULE.replace("wait {pct", "waiting {pct"))
    out.clear()
    assert run_all([changed], [folder], False, out.append) == EXIT_FAILED
    assert "    -summary: wait 65 % on 2 ranks" in out and "    +summary: waiting 65 % on 2 ranks" in out


def test_a_snapshot_of_no_rule_fails_and_update_removes_it(tmp_path):
    folder, rule = _user(tmp_path)
    run_all([rule], [folder], True, lambda _line: None)
    stale = folder / "snapshots" / "US009.snap"
    stale.write_text("# gone\n")
    out: list[str] = []
    assert run_all([rule], [folder], False, out.append) == EXIT_FAILED and any("US009.snap" in x for x in out)
    kept = folder / "snapshots" / "US001.snap"
    assert run_all([], [folder], True, out.append, disabled=[rule]) == EXIT_PASSED  # a disabled rule's stays
    assert not stale.exists() and kept.exists()
    assert run_all([], [folder], False, out.append, disabled=[rule]) == EXIT_PASSED


def test_a_degenerate_output_fails_the_case(tmp_path):
    text = RULE.replace("on {plural(run.ranks_analyzed, 'rank')}", "on {run.world_size} ranks")
    _folder, rule = _user(tmp_path, text)
    assert run_rule(rule)[0][0][1] == []  # a user rule is held to its own expectations
    rule.origin = "built-in"
    problems, _text = run_rule(rule)
    assert any("not a sentence a user could act on" in p for p in problems[0][1])


def test_a_part_left_out_for_a_missing_fact_fails_a_built_in_case(tmp_path):
    """Nothing stands in for a fact a case lacks: a summary part left out for it fails a built-in rule's case."""
    text = RULE.replace(
        "summary = \"wait {pct(median(rank.share.dataloader_wait))} on {plural(run.ranks_analyzed, 'rank')}\"",
        'summary = [{ text = "wait {pct(median(rank.share.dataloader_wait))}" }, { text = " on {run.world_size} ranks" }]',
    )
    _folder, rule = _user(tmp_path, text)
    assert run_rule(rule)[0][0][1] == []
    rule.origin = "built-in"
    problems, _text = run_rule(rule)
    assert any("is not said without run.world_size" in p for p in problems[0][1]), problems


def test_a_wrong_expectation_fails_and_the_cli_exits_1_with_a_diff(tmp_path):
    folder, _rule = _user(tmp_path, RULE.replace('name = "fires"\nexpect = "fire"', 'name = "fires"\nexpect = "quiet"'))
    cmd = [sys.executable, "-m", "ddpdoctor", "rules", "test", "--rules", str(folder), "--no-config"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "FAIL US001 fires: expected quiet, got fire" in done.stdout
    assert "note: 1 user rule without a snapshot" in done.stdout


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda s: s, None),
        (
            lambda s: s.replace('"run.ranks" = [0, 1]', '"run.rankz" = [0, 1]'),
            "base_facts.toml:4: unknown fact 'run.rankz'",
        ),
    ],
)
def test_base_facts_names_are_checked(tmp_path, edit, message):
    if message is None:
        _user(tmp_path, base=edit(BASE))
        return
    with pytest.raises(RuleError, match=re.escape(message)):
        _user(tmp_path, base=edit(BASE))


def test_an_unknown_unset_name_is_refused(tmp_path):
    with pytest.raises(RuleError, match="unknown fact 'run.rankz_analyzed'"):
        _user(tmp_path, RULE.replace('unset = ["run.ranks_analyzed"]', 'unset = ["run.rankz_analyzed"]'))


def _builtin_copy(tmp_path: Path, folder: str, rule_id: str, edit=lambda s: s) -> Path:
    """A copy of the built-in rules' layout with one rule put in ``folder``."""
    root = tmp_path / "rules"
    (root / folder).mkdir(parents=True)
    (root / "layout.toml").write_text((rules_dir() / "layout.toml").read_text())
    src = Path(BUILTIN.rules[rule_id].path)
    dest = root / folder / src.name
    dest.write_text(edit(src.read_text()))
    return dest


@pytest.mark.parametrize(
    "folder,rule_id,edit,message",
    [
        ("imbalance", "DL001", lambda s: s, "a dataloader rule belongs in rules/dataloader/, not in rules/imbalance/"),
        (
            "dataloader",
            "DL001",
            lambda s: s.replace('category = "dataloader"', 'category = "compute"'),
            "rule DL001 has category compute, but ids starting with DL are dataloader rules",
        ),
        (
            "dataloader",
            "DL001",
            lambda s: s.replace('id = "DL001"', 'id = "XY001"'),
            "the id of a dataloader rule starts with DL, not XY001",
        ),
    ],
)
def test_a_builtin_rule_out_of_place_is_refused_at_load(tmp_path, folder, rule_id, edit, message):
    path = _builtin_copy(tmp_path, folder, rule_id, edit)
    load_layout.cache_clear()
    layout = load_layout(path.parent.parent)
    rule = load_rule_file(path)
    with pytest.raises(RuleError, match=re.escape(message)) as exc:
        check_rule(layout, rule, path.parent.parent)
    assert str(exc.value).startswith(f"{path}:") and "\n" not in str(exc.value)


def test_moving_a_category_is_one_line_of_the_layout(tmp_path):
    path = _builtin_copy(tmp_path, "failure", "NET001")
    root = path.parent.parent
    layout_file = root / "layout.toml"
    load_layout.cache_clear()
    with pytest.raises(RuleError, match="belongs in rules/network/"):
        check_rule(load_layout(root), load_rule_file(path), root)
    text = layout_file.read_text()
    line = next(x for x in text.splitlines() if x.startswith("network "))
    layout_file.write_text(text.replace(line, line.replace('"network" }', '"failure" }')))
    load_layout.cache_clear()
    check_rule(load_layout(root), load_rule_file(path), root)


def test_a_user_rule_with_a_builtin_prefix_keeps_its_category(tmp_path):
    with pytest.raises(RuleError, match="ids starting with DL are dataloader rules"):
        _user(
            tmp_path,
            RULE.replace('id = "US001"', 'id = "DL901"').replace('category = "dataloader"', 'category = "compute"'),
        )


def test_the_cli_refuses_a_misplaced_rule_with_one_line_and_exit_2(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "US001.toml").write_text(
        RULE.replace('id = "US001"', 'id = "DL901"').replace('category = "dataloader"', 'category = "compute"')
    )
    cmd = [sys.executable, "-m", "ddpdoctor", "rules", "test", "--rules", str(folder), "--no-config"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "US001.toml:3: rule DL901 has category compute" in done.stderr


def test_the_layout_declares_every_builtin_folder():
    layout = load_layout(rules_dir())
    folders = {Path(r.path).parent.name for r in BUILTIN.rules.values()}
    assert folders <= {p.folder for p in layout.places}
    assert {r.category for r in BUILTIN.rules.values()} <= {p.category for p in layout.places}


def test_the_base_facts_files_are_what_make_base_facts_writes(tmp_path):
    """Never edited by hand: rewriting them from tests/data/base_run.json changes nothing (after a move of rules
    to a new folder the same command gives that folder the same values)."""
    from ddpdoctor.rules_engine.make_base_facts import write_all

    source = Path(__file__).resolve().parent / "data" / "base_run.json"
    folders = {Path(r.path).parent.name for r in BUILTIN.rules.values()}
    for name in folders:
        (tmp_path / name).mkdir()
    written = write_all(source, rules_root=tmp_path)
    assert sorted(p.parent.name for p in written) == sorted(folders)
    for p in written:
        assert p.read_text() == (rules_dir() / p.parent.name / p.name).read_text(), p.parent.name
