"""A real CPU DDP run (gloo, torchrun, 2 ranks) profiled with tensorboard_trace_handler, then analyzed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")

SCRIPT = Path(__file__).parent / "scripts" / "gloo_toy_train.py"


@pytest.fixture(scope="module")
def gloo_traces(tmp_path_factory):
    pytest.importorskip("torch")
    for _attempt in range(2):
        out = tmp_path_factory.mktemp("gloo")
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc_per_node=2",
                "--rdzv-endpoint=localhost:0",
                "--rdzv-backend=c10d",
                str(SCRIPT),
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        # torch itself sometimes aborts a rank at interpreter exit ("terminate called without an active
        # exception", SIGABRT) on this busy 2-core machine; that is the recording, not the analysis under
        # test: record once more, and only for that
        if res.returncode == 0 or "terminate called without an active exception" not in res.stderr:
            break
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_gloo_run_is_analyzed_from_the_host_side(gloo_traces, tmp_path):
    js = tmp_path / "a.json"
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(gloo_traces), "--json", str(js)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    d = json.loads(js.read_text())["analysis"]
    assert d["ranks_present"] == [0, 1] and d["world_size"] == 2
    for r in ("0", "1"):
        rank = d["ranks"][r]
        assert rank["device_kind"] == "cpu" and rank["backend"] == "gloo"
        assert rank["comm_source"] == "host annotations" and rank["steps"] == 4
        share = rank["share"]
        assert share["gpu_busy"] is None and share["host_idle"] is None and share["memcpy"] is None
        assert share["comm"] > 0 and share["compute"] > 0
        assert share["dataloader_wait"] > 0.15  # 32 items x 0.4 ms of a ~20-50 ms step
        assert share["comm_sync_wait"] is not None
    # rank 1 sleeps 30 ms before each forward: it is the straggler, rank 0 waits for it
    st = d["cross_rank"]["stragglers"]
    assert [s["rank"] for s in st] == [1]
    assert 15_000 < st[0]["late_us"] < 45_000
    assert d["ranks"]["0"]["share"]["comm_sync_wait"] > d["ranks"]["1"]["share"]["comm_sync_wait"]
    assert d["ranks"]["0"]["share"]["comm_exposed"] > 0.2
    # the trailing one-step trace the profiler writes on exit is not used in place of the real window
    assert any("holds no steps" in w for w in d["warnings"])
