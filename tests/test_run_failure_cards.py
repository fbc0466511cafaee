"""`ddpdoctor run` on runs that fail or are stopped (issue 27), with real torchrun on 2 CPU ranks:
torchrun's own output goes to launcher.log and the card leads; a script that cannot start is named in
the interpreter's words at the user's file:line; Ctrl-C exits 130 and keeps the performance verdict."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from subprocesses import project_env

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def _env():
    env = project_env(dict(COLUMNS="80"))
    return env


def _run(out, *command, options=()):
    return subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "run", "--out", str(out), *options, "--", *TORCHRUN, *map(str, command)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=_env(),
    )


def _flat(text: str) -> str:
    return " ".join(text.split())


def _card_checks(res, out):
    card = res.stdout
    assert card.startswith("Verdict: the run failed: The training script could not start"), card
    lines = [ln for ln in card.splitlines() if ln.strip()]
    assert len(lines) == len(set(lines)), card  # no line printed twice
    for wrong in ("(unknown)", "sys.exit(", "step 0", "KeyboardInterrupt", "rank None"):
        assert wrong not in card, wrong
    # torchrun's traceback and 'Root Cause' block are in launcher.log, not on the terminal
    assert "Root Cause" not in res.stderr and "ChildFailedError" not in res.stderr
    assert "Root Cause" in (out / "launcher.log").read_text()
    assert "the launcher's own output is in launcher.log" in res.stderr
    assert res.stderr.count("ddpdoctor: ") == 1, res.stderr  # one line before the card: the bundle


def test_a_misspelt_script_path_is_named_in_pythons_words(tmp_path):
    (tmp_path / "slow_rank.py").write_text("print('hi')\n")
    out = tmp_path / "bundle"
    res = _run(out, tmp_path / "slow_rnak.py")
    assert res.returncode != 0
    _card_checks(res, out)
    card = _flat(res.stdout)
    assert f"can't open file '{tmp_path / 'slow_rnak.py'}': [Errno 2] No such file or directory" in card
    assert f"Run {tmp_path / 'slow_rank.py'}" in card


def test_an_import_error_is_named_at_the_users_file_and_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import os\nimport torch\nimport torchvisionx  # typo\n")
    out = tmp_path / "bundle"
    res = _run(out, script)
    assert res.returncode != 0
    _card_checks(res, out)
    card = _flat(res.stdout)
    assert (
        f"An import failed at {script}:3, before the first training step: ModuleNotFoundError: "
        f"No module named 'torchvisionx'" in card
    )
    assert "before any step completed" in card


def test_ctrl_c_after_the_window_exits_130_and_keeps_the_verdict(tmp_path):
    out = tmp_path / "bundle"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--out",
            str(out),
            "--keep-going",
            "--warmup",
            "3",
            "--active",
            "3",
            "--",
            *TORCHRUN,
            str(ROOT / "tests" / "scripts" / "long_train.py"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    try:
        traces = [out / "ranks" / f"rank{r}" / "events.jsonl" for r in (0, 1)]
        deadline = time.time() + 180
        while time.time() < deadline and not all(t.is_file() and '"trace"' in t.read_text() for t in traces):
            time.sleep(0.5)
        time.sleep(1.0)  # training goes on (--keep-going)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, stderr[-2000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["interrupted_by"] == "SIGINT" and m["status"] == "complete"
    assert "interrupted by you (Ctrl-C) at step" in stderr and "exit code 130" in stderr
    assert "SignalException" not in stderr and "KeyboardInterrupt" not in stdout
    assert stdout.startswith("Verdict:") and "the run failed" not in stdout, stdout
    assert "note:       interrupted by you (Ctrl-C) at step" in stdout
