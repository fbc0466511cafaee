"""The CPUs a job's own processes want, recorded for real on CPU/gloo (bundle/loader_cpus.py): 2 ranks whose
DataLoader workers (num_workers=2) sleep 12 ms per sample on storage.  Capture records the training thread's and
the workers' run-queue wait over the window; the facts follow from them; workers that sleep do not make the job
oversubscribe its CPUs, so DL001 keeps "more workers" and nothing is taken from the collectives."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "scripts" / "waiting_loader_workers.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(JOB)]


def test_sleeping_workers_are_measured_and_do_not_oversubscribe(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--active", "6", "--out", str(out)]
    res = subprocess.run(
        [*cmd, "--json", str(tmp_path / "d.json"), "--", *TORCHRUN],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    for r in (0, 1):
        win = json.loads((out / "ranks" / f"rank{r}" / "settings.json").read_text())["loader_window"]
        assert win["train_runqueue_s"] >= 0 and win["workers_runqueue_s"] >= 0, win
    doc = json.loads((tmp_path / "d.json").read_text())
    facts = doc["facts"]
    assert facts["host.usable_cpus"] >= 1 and facts["loader.workers_cpus_wanted"] < facts["host.job_cpus_wanted"]
    assert 0 <= facts["train.runqueue_share"] <= 1 and 0 <= facts["loader.workers_runqueue_share"] <= 1
    dl = next((f for f in doc["findings"] if f["rule"] == "DL001"), None)
    assert dl is not None and dl["evidence"]["cpus_oversubscribed"] is False, dl and dl["evidence"]
    assert not dl["fixes"][0]["title"].endswith("not more workers")
    assert all("DataLoader workers oversubscribe" not in (c.get("why_not") or "") for c in doc["costs"])
