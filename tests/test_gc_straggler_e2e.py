"""GC pauses end to end: `ddpdoctor run` on a real 2-rank torchrun job (CPU, gloo) in which rank 1
keeps a rolling cache of cyclic records, so the threshold collector runs full collections on it that
walk a large long-lived index (tests/scripts/gc_straggler.py).  The late rank must be named with its
GC pause per step and the gc.freeze() fix."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import project_env

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).parent / "scripts" / "gc_straggler.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def _run(out: Path) -> subprocess.CompletedProcess:
    env = project_env()
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--out",
            str(out),
            "--json",
            str(out / "d.json"),
            "--warmup",
            "5",
            "--active",
            "9",
            "--",
            *TORCHRUN,
            str(SCRIPT),
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )


@pytest.fixture(scope="module")
def gc_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gc") / "bundle"
    out.mkdir()
    res = _run(out)
    assert res.returncode == 0, res.stderr[-3000:]
    return out, res.stdout, json.loads((out / "d.json").read_text())


def test_every_collection_is_recorded_per_rank(gc_run):
    out, _card, _d = gc_run
    ev = {r: json.loads((out / "ranks" / f"rank{r}" / "settings.json").read_text())["evidence"] for r in (0, 1)}
    gc1, gc0 = ev[1]["gc"], ev[0]["gc"]
    assert gc1["by_generation"]["2"]["count"] >= 1, gc1["by_generation"]
    assert gc1["ms_per_step"] > 5 * max(gc0["ms_per_step"], 1.0)
    assert all(len(c) == 5 for c in gc1["collections"])
    # the sampler starved during the full collections and the gaps were put on GC
    assert ev[1]["gil"]["starved_ms_per_step"]["gc"] > 0
    # the sampler thread's run-queue wait was read at every sample: the gaps' CPU starvation is set apart
    if os.path.exists("/proc/thread-self/schedstat"):
        for r in (0, 1):
            g = ev[r]["gil"]
            assert g["runqueue"]["read"] and g["cpu_starved_ms_per_step"] is not None, g["runqueue"]
            assert all(isinstance(gap["timeslices"], int) for gap in g["listed"]), g["listed"]
        gc_gaps = [gap for gap in ev[1]["gil"]["listed"] if gap["cause"] == "gc"]
        assert gc_gaps and all(gap["cpu_ms"] < gap["gc_ms"] for gap in gc_gaps), gc_gaps
    assert ev[1]["gil"]["native"]["sampler"] is None  # the C watchdog's dumps are opt-in


def test_the_late_rank_is_named_with_gc_and_the_freeze_fix(gc_run):
    _out, card, d = gc_run
    facts = d["facts"]
    assert facts["python.gc.rank"] == 1
    top = next(f for f in d["findings"] if f["rule"] == d["verdict"]["rule"])
    assert d["verdict"]["bottleneck"] == "imbalance", d["verdict"]["summary"]
    assert top["rule"] in ("IM001", "IM006"), top["rule"]
    assert "Garbage collection pauses" in top["summary"]
    assert "gc.freeze()" in top["fixes"][0]["change"], top["fixes"][0]
    assert "with_stack=True" not in json.dumps(top["fixes"])
    assert "garbage collection" in card and "gc.freeze()" in card
