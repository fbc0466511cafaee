"""torch.compile recompilation end to end: `ddpdoctor run` on a real 2-rank torchrun job (CPU,
gloo) whose DDP model is compiled (aot_eager, dynamic=False) and fed a new sequence length every
step (CP003 leads, its first fix names `dynamic`; the compile time is not taken for input work in
the loop, DL003), and the same job with one fixed length (compiled once before the window: quiet)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import project_env

from ddpdoctor.bundle.settings import load_bundle_facts

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).parent / "scripts" / "compile_train.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def _run(tmp_path, mode):
    out = tmp_path / mode
    env = project_env()
    # warm-up 2: the first compilations happen before the window; 4 recorded steps stay under Dynamo's
    # recompile limit (8) with one new length per step
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--out",
            str(out),
            "--no-analyze",
            "--warmup",
            "2",
            "--active",
            "4",
            "--min-window",
            "0",  # exactly 4 recorded steps: the recompile limit is counted in steps
            "--",
            *TORCHRUN,
            str(SCRIPT),
            mode,
            "12",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    diag = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert diag.returncode == 0, diag.stderr[-3000:]
    return out, load_bundle_facts([str(out)]), json.loads(diag.stdout)


def _fired(d):
    return [f["rule"] for f in d["findings"]]


def test_recompiling_every_step_is_named_with_its_fix(tmp_path):
    out, f, d = _run(tmp_path, "recompile")
    assert f["compile.used"] is True
    assert f["compile.window_compiles"] >= 4 and f["compile.steps_compiling"] == 4, f
    assert f["compile.share"] >= 0.3
    assert "size mismatch at index 1" in f["compile.reason"] and f["compile.size_dim"] == 1
    # compile frames are phase "compile", never the loop's input work
    assert f.get("python.input_work.share", 0) < 0.10
    v = d["verdict"]
    assert v["bottleneck"] == "compute" and v["rule"] == "CP003", v
    top = d["findings"][0]
    assert top["rule"] == "CP003" and "DL003" not in _fired(d)
    assert "dynamic" in top["fixes"][0]["title"] and "mark_dynamic(x, 1)" in top["fixes"][0]["change"]
    # the agent's own hooks stay out of the compiled graph: no guard on ddpdoctor's state
    for r in (0, 1):
        rec = json.loads((out / "ranks" / f"rank{r}" / "settings.json").read_text())["compile"]
        assert all("ddpdoctor" not in x["example"] and "evidence" not in x["guard"] for x in rec["reasons"]), rec


def test_compiled_once_with_static_shapes_is_quiet(tmp_path):
    _, f, d = _run(tmp_path, "static")
    assert f["compile.used"] is True and f["compile.window_compiles"] == 0 and f["compile.share"] == 0
    assert "CP003" not in _fired(d)
