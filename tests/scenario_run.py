"""Record one example scenario for real (`ddpdoctor run --no-analyze -- torchrun --standalone --nproc_per_node=2`,
CPU/gloo) into ``tmp_path/bundle`` and analyze it: the harness the live tests share."""

import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import project_env

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "examples" / "scenarios"


def record_scenario(tmp_path: Path, script: str, timeout: int = 300, run_opts: tuple[str, ...] = ()):
    """(the finished run, the bundle's path, the analysis report); ``run_opts``: more `ddpdoctor run` options."""
    pytest.importorskip("torch")
    env = project_env()
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--no-analyze", *run_opts, "--out", str(out), "--"]
    cmd += [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(SCENARIOS / script),
    ]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    from ddpdoctor.diagnosis import run_analyze

    return res, out, run_analyze([str(out)])
