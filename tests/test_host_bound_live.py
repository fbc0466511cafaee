"""Live (real torchrun, gloo, CPU): a recurrent cell stepped in a Python loop is host-bound.

Thousands of operators of a few µs each per step: the trace's training thread shows the step spent in
operators shorter than 50 µs and the Python between them, and the verdict's rule is CP002 (per-operator
overhead), not the generic compute-bound CP001.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "scenarios" / "python_unrolled_rnn_host_bound.py"


def test_live_python_loop_of_tiny_operators_is_host_bound(tmp_path):
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
    v = rep.diagnosis.verdict
    assert v.bottleneck == "compute" and v.rule == "CP002", (v, [f.rule for f in rep.diagnosis.findings])
    f = next(x for x in rep.diagnosis.findings if x.rule == "CP002")
    ops = rep.facts["rank.cpu_ops_per_step"].values
    assert ops.size == 2 and ops.min() > 1000, ops
    assert "operators per step on the training thread" in f.summary
    assert f.fixes[0].title.startswith("Give each operator more work")
