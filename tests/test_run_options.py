"""`run` and `analyze` share their analysis options (issue 27): the same names, defaults and help, and
`run` hands them to the analysis it starts; a bad --set or --rules stops `run` before the training."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from subprocesses import project_env

from ddpdoctor.cli import main
from ddpdoctor.cli.options import analysis_args

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("quiet", "sets", "rules_dirs", "no_config", "hta", "json_path", "report_dir", "verbose")
# (every command's shared options: tests/test_cli_consistency.py)


def _params(name):
    return {p.name: p for p in main.commands[name].params}


def test_run_and_analyze_share_the_analysis_options():
    run, analyze = _params("run"), _params("analyze")
    for name in SHARED:
        a, r = analyze[name], run[name]
        assert (a.opts, a.default, a.multiple) == (r.opts, r.default, r.multiple), name
        if name != "verbose":
            assert a.help == r.help, name


def test_analysis_args_are_analyze_arguments():
    args = analysis_args(["my_rules"], ["DL001.min_wait_share=0.2"], True, "off", True, "d.json", "rep", True)
    assert args == [
        "--rules",
        "my_rules",
        "--set",
        "DL001.min_wait_share=0.2",
        "--no-config",
        "--hta",
        "off",
        "--json",
        "d.json",
        "--report",
        "rep",
        "-q",
        "-v",
    ]
    assert analysis_args() == []


@pytest.mark.parametrize("option", [["--set", "XX001.nope=1"], ["--rules", "/no/such/folder"]])
def test_a_bad_analysis_option_stops_run_before_the_training(tmp_path, option):
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, ["run", "--out", str(out), *option, "--", sys.executable, "-c", "pass"])
    assert res.exit_code == 2 and not out.exists(), res.output


def test_try_refuses_the_files_of_a_single_runs_analysis(tmp_path):
    res = CliRunner().invoke(main, ["run", "--try", "DL001", "--report", str(tmp_path / "r"), "--", "python", "x.py"])
    assert res.exit_code == 2 and "analyze a trial's arm afterwards" in res.output


def test_a_bad_analysis_option_stops_try_before_the_first_arm(tmp_path):
    """--set/--rules/--hta are accepted with --try (every arm is diagnosed with them: tests/trial/
    test_tune_units.py); a bad one stops before the first arm."""
    out = tmp_path / "trial"
    res = CliRunner().invoke(main, ["run", "--try", "DL001", "--out", str(out), "--set", "XX001.nope=1", "--", "x"])
    assert res.exit_code == 2 and not out.exists(), res.output


@pytest.mark.live
def test_run_quiet_with_json_prints_nothing_of_its_own(tmp_path):
    pytest.importorskip("torch")
    env = project_env()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--out",
            str(tmp_path / "b"),
            "-q",
            "--hta",
            "off",
            "--json",
            str(tmp_path / "d.json"),
            "--set",
            "metrics.straggler.min_late_share=0.5",
            "--warmup",
            "2",
            "--active",
            "3",
            "--",
            sys.executable,
            str(ROOT / "tests" / "scripts" / "single_train.py"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ddpdoctor:" not in res.stdout + res.stderr and "Verdict:" not in res.stdout
    d = json.loads((tmp_path / "d.json").read_text())
    assert d["schema"] == "ddpdoctor.diagnosis/1"
