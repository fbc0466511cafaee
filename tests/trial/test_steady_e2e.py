"""The window's steady start (issue 37), for real on CPU/gloo: 2 ranks whose 14 DataLoader workers share one
lock per sample (examples/scenarios/loader_lock_bound_workers4.py). The loader prefetches 14 x 2 = 28 batches
at its start; the window must start once they are used up (step 29 on every rank, not --warmup's step 5),
and say so; with --steady-within 3 it starts at the bound and says the job was not steady."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "scenarios" / "loader_lock_bound_workers4.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(JOB)]


def _run(tmp_path: Path, *opts: str) -> tuple[dict, dict]:
    out, doc = tmp_path / "bundle", tmp_path / "d.json"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--min-window", "0", *opts, "--out", str(out), "--json", str(doc)]
    res = subprocess.run(
        [*cmd, "--", *TORCHRUN, "--workers", "14", "--steps", "60"], capture_output=True, text=True, timeout=400
    )
    assert res.returncode == 0, res.stderr[-3000:]
    ranks = {
        p.parent.name: json.loads(p.read_text(encoding="utf-8"))["window"]
        for p in sorted((out / "ranks").glob("rank*/settings.json"))
    }
    assert len(ranks) == 2
    return ranks, json.loads(doc.read_text(encoding="utf-8"))


def test_the_window_starts_after_the_prefetched_batches_on_every_rank(tmp_path):
    ranks, doc = _run(tmp_path)
    for w in ranks.values():
        assert w["steady"]["decided_by"] == "prefetch_used", w
        assert w["steady"]["from_step"] == 29 and w["first_step"] == 29 and w["complete"]
        assert w["steady"]["prefetched_batches"] == 28
    assert doc["facts"]["run.window.steady_note"].startswith(
        "steady from step 29: the loader's 28 prefetched batches were used up"
    )


def test_the_bound_starts_the_window_and_says_not_steady(tmp_path):
    ranks, doc = _run(tmp_path, "--steady-within", "3")
    for w in ranks.values():
        assert w["steady"]["decided_by"] == "bound" and w["first_step"] == 8 and w["complete"]
    assert doc["facts"]["run.window.steady_note"].startswith("not steady after 8 steps:")
