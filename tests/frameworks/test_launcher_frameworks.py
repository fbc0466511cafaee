"""Frameworks that start their ranks themselves (issue 36): PyTorch-Ignite's ``idist.Parallel(nproc_per_node=2)``
under `ddpdoctor run -- python job.py`, and Ray Train's ``TorchTrainer`` with capture switched on through
``ray.init(runtime_env={"env_vars": {"DDPDOCTOR_CAPTURE": DIR}})``.  Each rank becomes one when it joins its
process group; the processes that never join (the script's own, Ray's) write nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import free_port, project_env

pytestmark = [pytest.mark.frameworks, pytest.mark.live]  # real framework jobs under `ddpdoctor run`

JOBS = Path(__file__).parent / "jobs"


def _env(**extra):
    return project_env(extra, {k: v for k, v in os.environ.items() if not k.startswith("DDPDOCTOR_")})


def test_ignite_parallel_ranks_are_recorded_and_the_slow_rank_found(tmp_path):
    pytest.importorskip("ignite")
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--out", str(out), "--no-analyze", "--"]
    cmd += [sys.executable, str(JOBS / "ignite_job.py"), "--port", free_port()]
    res = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "complete" and m["ranks_present"] == [0, 1] and m["launcher"] == "ignite", m
    assert sorted(p.name for p in (out / "ranks").iterdir()) == ["rank0", "rank1"]
    s1 = json.loads((out / "ranks" / "rank1" / "settings.json").read_text())
    assert s1["dataloader"]["sampler"] == "DistributedSampler" and s1["ddp"]["used"] is not False
    from ddpdoctor.diagnosis import run_analyze

    rep = run_analyze([str(out)])
    v = rep.diagnosis.verdict
    assert v.bottleneck == "imbalance", (v, [f.rule for f in rep.diagnosis.findings])
    f = next(x for x in rep.diagnosis.findings if x.rule == v.rule)
    assert "Rank 1" in f.summary and "slow_feature_hash" in f.summary, f.summary


def test_ray_train_workers_write_one_bundle_and_rays_processes_none(tmp_path):
    pytest.importorskip("ray.train")
    out = tmp_path / "bundle"
    res = subprocess.run(
        [sys.executable, str(JOBS / "ray_job.py"), "--out", str(out)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if res.returncode != 0 and "The current node timed out during startup" in res.stderr:
        pytest.skip("Ray's own node did not start on this host (its raylet has 30 s to register): no Ray to test")
    assert res.returncode == 0, res.stderr[-4000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["ranks_present"] == [0, 1] and m["launcher"] == "ray" and m["capture"] == "environment", m
    assert sorted(p.name for p in (out / "ranks").iterdir()) == ["rank0", "rank1"]  # no Ray process wrote
    for r in (0, 1):
        s = json.loads((out / "ranks" / f"rank{r}" / "settings.json").read_text())
        assert s["window"]["complete"] and s["process_groups_joined"] == 1 and s["launcher"] == "ray"
