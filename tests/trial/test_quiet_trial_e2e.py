"""`run --try dataloader.num_workers=8` on 2 cores for real: the terminal shows one line per arm, not torch's
"This DataLoader will create 8 worker processes …" warning (ddpdoctor chose the 8) nor the job's progress
lines; the rank logs in the arm's bundle keep both."""

from pathlib import Path

import pytest
from subprocesses import TORCHRUN, run_ddpdoctor

pytestmark = pytest.mark.live

JOB = Path(__file__).resolve().parents[2] / "examples" / "io_wait_loader.py"


def test_try_prints_one_line_per_arm_and_keeps_torchs_warning_about_its_setting_in_the_log(tmp_path):
    out = tmp_path / "trial"
    # --steady-within 0: an 8-step job cannot wait for 8 workers' 16 prefetched batches (issue 37); the screen is tested
    args = ["run", "--try", "dataloader.num_workers=8", "--repeat", "1", "--warmup", "2", "--active", "3"]
    args += ["--steady-within", "0"]
    res = run_ddpdoctor([*args, "--out", out, "--", *TORCHRUN, JOB, "--steps", "8"], cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    terminal = res.stdout + res.stderr
    assert "This DataLoader will create" not in terminal
    assert "done:" not in terminal
    arm_lines = [ln for ln in res.stderr.splitlines() if ln.startswith("ddpdoctor: trial ") and "median step" in ln]
    assert [ln.split(":")[1] for ln in arm_lines] == [" trial baseline #1", " trial try #1 (dataloader.num_workers=8)"]
    logs = "".join(p.read_text() for p in sorted((out / "try-1" / "ranks").glob("rank*/output.log")))
    assert "This DataLoader will create 8 worker processes" in logs
    assert "dataloader.num_workers is the setting ddpdoctor tried" in logs
