"""`compare` on the folders `run --try` and `tune` write (issue 41, item 4): such a folder stands for its baseline
arm / original job as BEFORE and its try arm / final settings as AFTER; alone, for both."""

import json
import subprocess
from pathlib import Path

from subprocesses import run_ddpdoctor
from tracebuilder import gpu_step_trace


def _bundle(folder: Path, pid: int) -> Path:
    for r in (0, 1):
        (folder / "ranks" / f"rank{r}").mkdir(parents=True, exist_ok=True)
        gpu_step_trace(rank=r, world_size=2, pid=pid + r).write(folder / "ranks" / f"rank{r}" / f"rank{r}.json")
    return folder


def _trial(folder: Path, pid: int) -> Path:
    arms = [
        {"arm": "baseline", "repeat": 1, "bundle": str(_bundle(folder / "baseline-1", pid))},
        {"arm": "try", "repeat": 1, "bundle": str(_bundle(folder / "try-1", pid + 10))},
    ]
    (folder / "trial.json").write_text(json.dumps({"schema": "ddpdoctor.trial/1", "arms": arms}))
    return folder


def _tune(folder: Path, kept: bool) -> Path:
    _bundle(folder / "baseline-0", 100)
    _trial(folder / "trial-1", 200)
    trial = {"trial": 1, "kept": kept, "folder": str(folder / "trial-1"), "change": {"ddp.bucket_cap_mb": 100}}
    doc = {"schema": "ddpdoctor.tune/1", "trials": [trial], "settings": {"ddp.bucket_cap_mb": 100} if kept else {}}
    (folder / "tune.json").write_text(json.dumps(doc))
    return folder


def _compare(*args) -> subprocess.CompletedProcess:
    return run_ddpdoctor(["compare", *args, "--format", "json"], timeout=300)


def test_a_trial_folder_on_either_side(tmp_path):
    base = _bundle(tmp_path / "base", 50)
    trial = _trial(tmp_path / "try", 60)
    res = _compare(base, trial)
    assert res.returncode == 0, res.stderr  # was: exit 2, "rank 0 has traces from different runs"
    assert f"AFTER {trial}: the trial's try arm (try-1)" in res.stderr
    assert json.loads(res.stdout)["schema"].startswith("ddpdoctor.")
    res = _compare(trial, base)
    assert res.returncode == 0, res.stderr
    assert f"BEFORE {trial}: the trial's baseline arm (baseline-1)" in res.stderr


def test_a_moved_trial_folder_finds_its_arms_beside_trial_json(tmp_path):
    trial = _trial(tmp_path / "try", 60)
    moved = tmp_path / "elsewhere"
    trial.rename(moved)
    res = _compare(_bundle(tmp_path / "b", 5), moved)
    assert res.returncode == 0, res.stderr
    assert "the trial's try arm (try-1)" in res.stderr


def test_a_tune_folder_alone_is_original_against_final(tmp_path):
    tune = _tune(tmp_path / "tune", kept=True)
    res = _compare(tune)
    assert res.returncode == 0, res.stderr
    assert "the original job's run against the run with the final settings (ddp.bucket_cap_mb=100)" in res.stderr
    res = _compare(_bundle(tmp_path / "b", 7), tune)
    assert res.returncode == 0, res.stderr
    assert f"AFTER {tune}: the run with the final settings (ddp.bucket_cap_mb=100) ({Path('trial-1', 'try-1')})" in (
        res.stderr
    )


def test_a_tune_that_kept_nothing_says_so(tmp_path):
    tune = _tune(tmp_path / "tune", kept=False)
    res = _compare(tune)
    assert res.returncode == 2
    assert "tune kept no change, so its final run is the original job's: nothing to compare" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
