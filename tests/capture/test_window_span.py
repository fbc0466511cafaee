"""How many steps the window records (capture/agent/span.py): at least --active and at least
DDPDOCTOR_MIN_WINDOW_S of training, rank 0's count on every rank.  Unit tests with a store built in
code; end to end on a real 2-rank torchrun job with 3 ms steps (CPU, gloo)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "agent_span_under_test", ROOT / "ddpdoctor" / "capture" / "agent" / "span.py"
)
span = importlib.util.module_from_spec(spec)
spec.loader.exec_module(span)


def test_steps_for_a_window_of_at_least_min_seconds():
    assert span.steps_for(5, 0.004, 0.5) == 125  # 5 steps of 4 ms are 20 ms
    assert span.steps_for(5, 0.2, 0.5) == 5  # 1 s already
    assert span.steps_for(5, 0.1, 0.5) == 5  # exactly 0.5 s
    assert span.steps_for(5, 0.0001, 0.5) == span.MAX_ACTIVE
    assert span.steps_for(5, 0.004, 0.0) == 5  # --min-window 0: exactly --active
    assert span.steps_for(5, None, 0.5) == 5 and span.steps_for(300, 0.001, 0.5) == 300
    assert span.min_window_s({}) == 0.5 and span.min_window_s({"DDPDOCTOR_MIN_WINDOW_S": "0"}) == 0.0
    assert span.min_window_s({"DDPDOCTOR_MIN_WINDOW_S": "nan"}) == 0.5
    assert span.min_window_s({"DDPDOCTOR_MIN_WINDOW_S": "-1"}) == 0.5


class FakeStore:
    def __init__(self, values=None):
        self.values = dict(values or {})

    def set(self, k, v):
        self.values[k] = v.encode()

    def get(self, k):
        return self.values[k]

    def wait(self, keys, timeout):
        if any(k not in self.values for k in keys):
            raise RuntimeError("Socket Timeout")


def fake_torch(rank: int, store: FakeStore, world: int = 2):
    c10d = type("c10d", (), {"_get_default_store": staticmethod(lambda: store)})
    dist = type(
        "dist",
        (),
        {
            "is_available": staticmethod(lambda: True),
            "is_initialized": staticmethod(lambda: True),
            "get_world_size": staticmethod(lambda: world),
            "get_rank": staticmethod(lambda: rank),
            "distributed_c10d": c10d,
        },
    )
    return type("torch", (), {"distributed": dist})


def test_every_rank_takes_rank_0s_count():
    store, env = FakeStore(), {"TORCHELASTIC_RUN_ID": "job1", "DDPDOCTOR_RUN_ID": "node0"}
    assert span.agreed_steps(fake_torch(0, store), env, 120, 5) == (120, "rank 0")
    # another node's `ddpdoctor run` has a run id of its own; the job's id is what the ranks share (the CI's
    # two-node test hung when the key held ddpdoctor's run id: node 1 never saw rank 0's count)
    other_node = {"TORCHELASTIC_RUN_ID": "job1", "DDPDOCTOR_RUN_ID": "node1"}
    assert span.agreed_steps(fake_torch(1, store), other_node, 118, 5) == (120, "rank 0")
    # rank 1 measured a slightly different step time and would have asked for 118
    assert span.agreed_steps(fake_torch(1, store), env, 118, 5) == (120, "rank 0")
    # rank 0 never wrote it: the count every rank was given
    assert span.agreed_steps(fake_torch(1, FakeStore()), env, 118, 5) == (5, "not agreed")
    # one process, no process group: its own count
    assert span.agreed_steps(fake_torch(0, store, world=1), env, 118, 5) == (118, "own")
    # a restarted torchrun attempt does not read the last attempt's count
    restarted = {**env, "TORCHELASTIC_RESTART_COUNT": "1"}
    assert span.agreed_steps(fake_torch(1, store), restarted, 118, 5) == (5, "not agreed")


JOB = """
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
m = DDP(torch.nn.Linear(64, 64)); opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range(2000):
    loss = m(torch.randn(32, 64)).sum(); opt.zero_grad(); loss.backward(); opt.step()
dist.destroy_process_group()
"""


@pytest.mark.live
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torchrun jobs on Linux only in this suite")
def test_e2e_fast_steps_record_a_longer_window_on_every_rank(tmp_path):
    script = tmp_path / "fast_steps.py"
    script.write_text(JOB)
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--out", str(out), "--no-analyze", "--"]
    cmd += [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    windows = [json.loads((out / "ranks" / f"rank{r}" / "settings.json").read_text())["window"] for r in (0, 1)]
    for w in windows:
        assert w["requested_active"] == 5 and w["active_decided_by"] == "rank 0" and w["complete"]
        assert w["recorded_steps"] == w["active"] > 5
    assert windows[0]["active"] == windows[1]["active"]


SHORT = """
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
m = DDP(torch.nn.Linear(64, 64)); opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range(14):
    loss = m(torch.randn(32, 64)).sum(); opt.zero_grad(); loss.backward(); opt.step()
print(f"finished all {dist.get_rank()}")  # one write: the two ranks share the pipe
dist.destroy_process_group()
"""


@pytest.mark.live
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torchrun jobs on Linux only in this suite")
def test_e2e_a_script_that_ends_inside_the_longer_window_leaves_a_complete_bundle(tmp_path):
    """14 fast steps: 5 warm-up, then the window asks for far more than the 9 left; the script's end cuts
    it after its 5 steps were recorded: complete, every whole step kept, the script's teardown dropped."""
    from ddpdoctor.analysis import AnalyzeOptions, analyze

    script = tmp_path / "short.py"
    script.write_text(SHORT)
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--out", str(out), "--no-analyze", "--"]
    cmd += [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "finished all 0" in proc.stdout + proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete", manifest
    for r in (0, 1):
        s = json.loads((out / "ranks" / f"rank{r}" / "settings.json").read_text())
        w = s["window"]
        assert w["complete"] and w["cut_by_script_end"] and w["active"] > w["recorded_steps"] >= 5
        assert s["steps_completed"] == 14 and w["recorded_steps"] == 14 - 5
    a = analyze([str(out)], AnalyzeOptions(jobs=1, hta="off"))
    assert [len(x.steps) for x in a.summaries] == [9, 9]
    # the trace's steps are the 9 whole ones (ProfilerStep#5-#13), none holding the script's teardown
    assert [[w.number for w in x.steps] for x in a.summaries] == [list(range(5, 14))] * 2
