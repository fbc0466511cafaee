"""`ddpdoctor rules list/explain/facts` fit the terminal: 80 columns when piped (issue 27)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpdoctor.cli import main
from ddpdoctor.rules_engine.registry import build_ruleset

ONE_WORD = re.compile(r"^\s*\S+$")  # a reference URL or a long name cannot be wrapped


def _run(monkeypatch, *args, columns="80"):
    monkeypatch.setenv("COLUMNS", columns)
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == 0, res.output
    return res.output.splitlines()


def _too_wide(lines, width):
    return [ln for ln in lines if len(ln) > width and not ONE_WORD.match(ln)]


def test_rules_list_and_facts_fit_80_columns(monkeypatch):
    lines = _run(monkeypatch, "rules", "list", "--no-config")
    assert not _too_wide(lines, 80)
    assert lines[0].startswith("CF001  config") and "every rank sees the same data" in lines[1]
    facts = _run(monkeypatch, "rules", "facts")
    assert not _too_wide(facts, 80) and any(ln.startswith("straggler.late_share") for ln in facts)


def test_rules_list_keeps_one_line_per_rule_when_wide(monkeypatch):
    lines = _run(monkeypatch, "rules", "list", "--no-config", columns="200")
    assert lines[0].startswith("CF001") and lines[0].endswith("every rank sees the same data")


def _explained_fit(monkeypatch, ids, width):
    for rule_id in ids:
        lines = _run(monkeypatch, "rules", "explain", rule_id, "--no-config", columns=width)
        assert not _too_wide(lines, int(width)), (rule_id, _too_wide(lines, int(width)))


@pytest.mark.slow  # one `rules explain` per rule (each reads every rule file): the fast tier explains a few
@pytest.mark.parametrize("width", ["80", "64"])
def test_every_rule_explained_fits_the_width(monkeypatch, width):
    ids = [r.id for r in build_ruleset([], [], use_config=False).active()]
    assert len(ids) > 20
    _explained_fit(monkeypatch, ids, width)


def test_the_longest_explanations_fit_64_columns(monkeypatch):
    """The fast tier's case: the three rules with the longest rule files (the most text to wrap)."""
    rules = build_ruleset([], [], use_config=False).active()
    longest = sorted(rules, key=lambda r: -len(Path(r.path).read_text(encoding="utf-8")))[:3]
    _explained_fit(monkeypatch, [r.id for r in longest], "64")


def test_explain_says_batches_not_batchs(monkeypatch):
    text = "\n".join(_run(monkeypatch, "rules", "explain", "DL001", "--no-config"))
    assert "<epoch_batches> batches per rank" in text and "batchs" not in text


def test_explain_names_a_built_in_rule_file_without_the_checkout_path(monkeypatch):
    last = _run(monkeypatch, "rules", "explain", "CF001", "--no-config")[-2:]
    assert "Defined in rules/config/CF001-" in " ".join(last), last
