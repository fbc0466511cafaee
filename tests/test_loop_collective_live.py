"""Live (real torchrun, gloo, CPU): the script's own all_gather_object every step is timed on every rank by the
stack sampler and named by its call site (bundle/loop_collectives.py), and CM001, where it fires, leads with it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "scenarios" / "all_gather_object_metrics.py"


def test_live_all_gather_object_every_step_is_named(tmp_path):
    pytest.importorskip("torch")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--no-analyze", "--out", str(out), "--"]
    cmd += [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT)]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    from ddpdoctor.diagnosis import run_analyze

    rep = run_analyze([str(out)])
    f = rep.facts
    assert f["python.loop_collective.call"] == "all_gather_object" and f["python.loop_collective.object_call"] is True
    assert "gather_predictions (all_gather_object_metrics.py:" in f["python.loop_collective.where"]
    assert f["python.loop_collective.share"] >= 0.05, f["python.loop_collective.share"]
    cm = [x for x in rep.diagnosis.findings if x.rule == "CM001"]
    if cm:
        assert cm[0].fixes[0].title.startswith("torch.distributed.all_gather_object in gather_predictions")
