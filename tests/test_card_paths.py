"""The card's `Next:` command at any checkout path (issue 27): an input under the current folder is
shown relative to it, and a word longer than the line is split so that it still pastes into a shell."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from test_card import _doc

from ddpdoctor.report.card import next_step, render_card
from ddpdoctor.text import shell

DEEP = "/srv/" + "/".join(["a_rather_long_folder_name_for_a_checkout"] * 4) + "/sample_traces/run_one"


def test_an_input_under_the_current_folder_is_shown_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = _doc(inputs=[str(tmp_path / "bundles" / "run one")], verdict={**_doc()["verdict"], "failed": True})
    cmd, _why, _after = next_step(d, None, None)
    assert cmd == "ddpdoctor analyze 'bundles/run one' --report report-run-one"


def test_a_card_for_an_input_at_a_deep_path_fits_80_columns(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert len(DEEP) > 120
    d = _doc(inputs=[DEEP], facts={"run.status": "complete"})  # no command: the Next: line is analyze …
    lines = render_card(d)
    assert max(map(len, lines)) <= 80, [ln for ln in lines if len(ln) > 80]
    assert any(ln.startswith("Next: ddpdoctor analyze") for ln in lines)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to paste the command into")
def test_a_split_long_word_pastes_back_whole():
    lines = shell(f"printf '%s\\n' {DEEP} --report ddpdoctor-report", 60, "", "        ")
    assert max(map(len, lines)) <= 60 and len(lines) >= 4
    out = subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, text=True, timeout=30)
    assert out.stdout.splitlines() == [DEEP, "--report", "ddpdoctor-report"]


def test_a_quoted_word_is_never_split():
    quoted = "'" + DEEP + " x'"
    lines = shell(f"ddpdoctor analyze {quoted}", 60, "Next: ", "        ")
    assert quoted in "\n".join(lines)
