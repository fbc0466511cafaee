"""`ddpdoctor run` beside a CPU burner (issue 27): two busy-looping processes load both CPUs while a
2-rank torchrun job is captured.  Rank 1 records many more events per step than rank 0, so its trace
takes seconds longer to stop and export after the window; DDPDOCTOR_STUCK_S=1 makes the stuck-rank
watchdog as quick to fire as it can be.  Before the fix, the watchdog took rank 1's export (in
torch/autograd/profiler.py) for a collective its stopped peer never joins and ended it: 'rank 1:
stuck in a collective at step 43 after peers stopped', no trace from rank 1, exit 1."""

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
SCRIPT = Path(__file__).parent / "scripts" / "uneven_trace.py"


@pytest.fixture
def cpu_burners():
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_a_rank_still_exporting_its_trace_is_not_taken_for_stuck(tmp_path, cpu_burners):
    out = tmp_path / "bundle"
    env = project_env(dict(DDPDOCTOR_STUCK_S="1"))
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
            "3",
            "--active",
            "40",
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(SCRIPT),
            "3000",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=env,
    )
    assert all(p.poll() is None for p in cpu_burners)  # the load was there the whole time
    events = {
        r: [json.loads(x) for x in (out / "ranks" / f"rank{r}" / "events.jsonl").read_text().splitlines()]
        for r in (0, 1)
    }
    kinds = {r: [e["kind"] for e in evs] for r, evs in events.items()}
    assert "stuck_after_peer_stop" not in kinds[1], res.stderr[-2000:]
    assert res.returncode == 0, res.stderr[-2000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "complete" and m["ranks_present"] == [0, 1]
    # the case the test is about happened: rank 1 was still exporting after rank 0 had stopped
    trace = {r: next(e for e in evs if e["kind"] == "trace") for r, evs in events.items()}
    stop0 = next(e for e in events[0] if e["kind"] == "stop")
    assert trace[1]["time"] - trace[1]["export_s"] < stop0["time"] < trace[1]["time"], (trace, stop0)
