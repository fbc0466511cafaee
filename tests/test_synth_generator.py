"""The synthetic trace generator: file structure, causal launches, aligned collectives, and a
truth that an independent recount of the written events agrees with."""

from __future__ import annotations

import gzip
import json
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

try:
    import ddpdoctor_synth  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddpdoctor_synth import RankSpec, Scenario, Truth, dump_scenario, generate, load_scenario, scenario_from_shares

SCENARIOS = Path(__file__).resolve().parents[1] / "ddpdoctor_synth" / "scenarios"
DL_NAME = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
EXCLUSIVE = ("compute", "comm_exposed", "memcpy", "dataloader_wait", "host_idle", "other")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")

# small and fast: ~250 kernels per step
SMALL = dict(world_size=4, steps=3, kernel_us=400.0, straggler_rank=3, straggler_extra_us=8000.0, seed=7)


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth_small")
    truth = generate(Scenario(**SMALL), out, gzip=True)
    traces = {r: load(out / f"rank{r}.pt.trace.json.gz") for r in range(4)}
    return out, truth, traces


def xs(trace: dict, cat: str | None = None) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and (cat is None or e["cat"] == cat)]


# ---------------------------------------------------------------- an independent recount
def ulen(spans, lo: float, hi: float) -> float:
    total, cur = 0.0, lo
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in spans):
        if e > cur and e > s:
            total += e - max(s, cur)
            cur = e
    return total


def recount(trace: dict) -> list[dict[str, float]]:
    """The analyzer's columns per step, computed from the parsed events alone."""
    gpu = [e for e in xs(trace) if e["cat"] in GPU_CATS]
    rt_by_corr = {e["args"]["correlation"]: e for e in xs(trace, "cuda_runtime")}
    steps = sorted(
        (e for e in xs(trace, "user_annotation") if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"]
    )
    host = [(e["ts"], e["ts"] + e["dur"]) for e in xs(trace) if e["cat"] in ("cpu_op", "cuda_runtime")]
    dl = [(e["ts"], e["ts"] + e["dur"]) for e in xs(trace, "user_annotation") if e["name"] == DL_NAME]

    def span(e):
        return e["ts"], e["ts"] + e["dur"]

    out = []
    for st in steps:
        lo, hi = span(st)
        launched = [g for g in gpu if lo <= rt_by_corr[g["args"]["correlation"]]["ts"] < hi]
        hi = max([hi] + [g["ts"] + g["dur"] for g in launched])
        comp = [span(g) for g in gpu if g["cat"] == "kernel" and not g["name"].startswith("nccl")]
        comm = [span(g) for g in gpu if g["name"].startswith("nccl")]
        mem = [span(g) for g in gpu if g["cat"] != "kernel"]
        U = lambda *xs_, lo=lo, hi=hi: ulen([s for x in xs_ for s in x], lo, hi)  # noqa: E731
        c, cn, busy, gd = U(comp), U(comp, comm), U(comp, comm, mem), U(comp, comm, mem, dl)
        named = lambda pred, U=U: U([span(e) for e in xs(trace) if pred(e)])  # noqa: E731
        out.append(
            {
                "step_time": hi - lo,
                "compute": c,
                "comm": U(comm),
                "comm_exposed": cn - c,
                "memcpy": busy - cn,
                "gpu_busy": busy,
                "dataloader_wait": gd - busy,
                "host_idle": U(comp, comm, mem, dl, host) - gd,
                "forward": named(lambda e: e["name"] == "DistributedDataParallel.forward"),
                "backward": named(lambda e: e["name"].startswith("autograd::engine::evaluate_function: ")),
                "optimizer": named(lambda e: e["name"] == "Optimizer.step#SGD.step"),
                "cpu_span_end": span(st)[1],
            }
        )
    return out


def nccl_kernels(trace: dict) -> list[dict]:
    return sorted((e for e in xs(trace, "kernel") if e["name"].startswith("nccl")), key=lambda e: e["ts"])


# ---------------------------------------------------------------- structure
def test_files_and_top_level_structure(small):
    out, truth, traces = small
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"rank{r}.pt.trace.json.gz" for r in range(4)] + ["truth.json"]
    )
    for r, t in traces.items():
        assert t["schemaVersion"] == 1
        assert t["deviceProperties"][0]["name"] == "NVIDIA A100-SXM4-80GB"
        assert t["deviceProperties"][0]["totalGlobalMem"] == 85899345920
        assert t["distributedInfo"] == {
            **t["distributedInfo"],
            "backend": "nccl",
            "rank": r,
            "world_size": 4,
            "pg_count": 1,
            "nccl_version": "2.21.5",
        }
        assert t["displayTimeUnit"] == "ms" and isinstance(t["baseTimeNanoseconds"], int)
        assert t["traceName"].endswith(f"rank{r}.pt.trace.json.gz")
        assert t["traceEvents"][-1]["cat"] == "Trace" and t["traceEvents"][-1]["pid"] == "Spans"
        steps = [e["name"] for e in xs(t, "user_annotation") if e["name"].startswith("ProfilerStep#")]
        assert steps == ["ProfilerStep#10", "ProfilerStep#11", "ProfilerStep#12"]
        meta = {
            (e["name"], e["pid"], e["tid"]): e["args"]["name"]
            for e in t["traceEvents"]
            if e["ph"] == "M" and "name" in e["args"]
        }
        pid = 1000 + r
        assert meta[("process_name", pid, 0)] == "python"
        assert meta[("process_name", 0, 0)] == "GPU 0"
        assert meta[("thread_name", 0, 7)] == "stream 7 " and meta[("thread_name", 0, 20)] == "stream 20 "
        names = {e["name"] for e in xs(t)}
        for n in (
            DL_NAME,
            "DistributedDataParallel.forward",
            "Optimizer.step#SGD.step",
            "Optimizer.zero_grad#SGD.zero_grad",
            "nccl:all_reduce",
            "record_param_comms",
            "aten::addmm",
            "cudaLaunchKernel",
            "cudaMemcpyAsync",
            "Memcpy HtoD (Pinned -> Device)",
        ):
            assert n in names, n
        # backward runs on its own thread
        bwd_tids = {e["tid"] for e in xs(t) if e["name"].startswith("autograd::engine::evaluate_function")}
        fwd_tids = {e["tid"] for e in xs(t) if e["name"] == "DistributedDataParallel.forward"}
        assert len(bwd_tids) == 1 and len(fwd_tids) == 1 and bwd_tids != fwd_tids
        for e in xs(t, "cpu_op"):
            assert {"External id", "Record function id", "Ev Idx"} <= set(e["args"])
        k = nccl_kernels(t)[0]
        assert k["tid"] == 20 and k["pid"] == 0 and k["args"]["stream"] == 20
        assert k["args"]["Collective name"] == "allreduce" and k["args"]["Group size"] == 4
        assert k["args"]["Process Group Ranks"] == "[0, 1, 2, 3]" and k["args"]["dtype"] == "Float"


def test_timestamps_have_three_decimals(tmp_path):
    generate(Scenario(world_size=2, steps=1, kernel_us=1000.0), tmp_path, gzip=False)
    text = (tmp_path / "rank0.pt.trace.json").read_text()
    stamps = re.findall(r'"(?:ts|dur)": ([0-9.]+)', text)
    assert stamps and all(re.fullmatch(r"\d+\.\d{3}", s) for s in stamps)


def test_durations_non_negative_and_host_nesting(small):
    _, _, traces = small
    for t in traces.values():
        by_thread = defaultdict(list)
        for e in xs(t):
            assert e["dur"] >= 0
            if e["pid"] not in (0, "Spans"):
                by_thread[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
        for spans in by_thread.values():  # events on a thread nest, never partially overlap
            stack: list[float] = []
            for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
                while stack and stack[-1] <= s + 1e-6:
                    stack.pop()
                assert not stack or e <= stack[-1] + 1e-6, (s, e, stack[-1])
                stack.append(e)


def test_every_gpu_event_has_an_earlier_launch(small):
    _, _, traces = small
    for t in traces.values():
        rts = {e["args"]["correlation"]: e for e in xs(t, "cuda_runtime")}
        flows = {(e["ph"], e["id"]): e for e in t["traceEvents"] if e.get("cat") == "ac2g"}
        gpu = [e for e in xs(t) if e["cat"] in GPU_CATS]
        assert len(gpu) > 500
        for g in gpu:
            c = g["args"]["correlation"]
            rt = rts[c]
            assert rt["ts"] < g["ts"]
            assert rt["args"]["External id"] == g["args"]["External id"]
            assert rt["name"] == ("cudaMemcpyAsync" if g["cat"] == "gpu_memcpy" else "cudaLaunchKernel")
            assert flows[("s", c)]["ts"] == rt["ts"] and flows[("s", c)]["tid"] == rt["tid"]
            assert flows[("f", c)]["ts"] == g["ts"] and flows[("f", c)]["tid"] == g["tid"]


def test_allreduces_end_together_on_every_rank(small):
    _, truth, traces = small
    per_rank = [nccl_kernels(traces[r]) for r in range(4)]
    assert all(len(k) == 3 * 4 for k in per_rank)  # steps x buckets
    for i in range(len(per_rank[0])):
        ends = [k[i]["ts"] + k[i]["dur"] for k in per_rank]
        assert max(ends) - min(ends) < 1.0
        # the straggler arrives last, so its kernel is the bare transfer
        durs = [k[i]["dur"] for k in per_rank]
        assert durs[3] == pytest.approx(min(durs), abs=1e-3)
    # sync wait: ranks 0-2 wait 8 ms per step at the first bucket
    for r in range(3):
        assert truth.per_rank_us[r]["comm_sync_wait"] == pytest.approx(8000.0, abs=1.0)
    assert truth.per_rank_us[3]["comm_sync_wait"] == pytest.approx(0.0, abs=1e-6)
    assert truth.per_rank_us[0]["comm_transfer"] == pytest.approx(Scenario().comm_us, abs=1.0)


# ---------------------------------------------------------------- truth
def test_truth_shares_add_up(small):
    _, truth, _ = small
    for r in range(4):
        sh, us = truth.per_rank[r], truth.per_rank_us[r]
        assert sum(sh[k] for k in EXCLUSIVE) == pytest.approx(1.0, abs=1e-9)
        assert sum(us[k] for k in EXCLUSIVE) == pytest.approx(us["step_time"], abs=1e-6)
        assert all(sh[k] >= -1e-12 for k in sh)
        assert sh["step_time"] == 1.0 and truth.step_time_us[r] == us["step_time"]


def test_straggler_truth(small):
    _, truth, traces = small
    assert truth.straggler == 3
    assert truth.straggler_late_us == pytest.approx(8000.0, abs=1.0)
    first = [[k for k in nccl_kernels(traces[r])][::4] for r in range(4)]  # first bucket of each step
    for i in range(3):
        starts = [first[r][i]["ts"] for r in range(4)]
        assert starts[3] - statistics.median(starts[:3]) == pytest.approx(8000.0, abs=1.0)


def test_truth_matches_recount_of_written_events(small):
    out, truth, traces = small
    for r, t in traces.items():
        steps = recount(t)
        assert len(steps) == truth.steps == 3
        for k in (
            "step_time",
            "compute",
            "comm",
            "comm_exposed",
            "memcpy",
            "gpu_busy",
            "dataloader_wait",
            "host_idle",
            "forward",
            "backward",
            "optimizer",
        ):
            mean = statistics.fmean(s[k] for s in steps)
            assert mean == pytest.approx(truth.per_rank_us[r][k], abs=0.01), (r, k)
    saved = Truth.load(out / "truth.json")
    assert saved.per_rank == truth.per_rank and saved.straggler == 3
    doc = json.loads((out / "truth.json").read_text())
    assert doc["schema"] == "ddpdoctor.synth-truth/1" and doc["scenario"]["straggler_rank"] == 3


def test_steps_are_contiguous_windows(small):
    _, _, traces = small
    for t in traces.values():
        steps = recount(t)
        ann = sorted(
            (e for e in xs(t, "user_annotation") if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"]
        )
        for a, b in zip(ann, ann[1:]):
            assert a["ts"] + a["dur"] == pytest.approx(b["ts"], abs=1e-3)
        for a, s in zip(ann, steps):
            assert a["dur"] == pytest.approx(s["step_time"], abs=1e-3)  # no extension needed


def test_scenario_from_shares_hits_targets(tmp_path):
    sc = scenario_from_shares(
        step_us=100000,
        dataloader=0.30,
        comm=0.40,
        comm_exposed=0.20,
        straggler_rank=3,
        straggler_extra_us=8000,
        world_size=4,
        steps=2,
        kernel_us=500.0,
    )
    truth = generate(sc, tmp_path, gzip=False)
    for r in range(3):
        sh = truth.per_rank[r]
        assert sh["dataloader_wait"] == pytest.approx(0.30, abs=0.005)
        assert sh["comm"] == pytest.approx(0.40, abs=0.005)
        assert sh["comm_exposed"] == pytest.approx(0.20, abs=0.005)
        assert sh["memcpy"] == pytest.approx(0.01, abs=0.005)
        assert sh["host_idle"] == pytest.approx(0.0, abs=0.005)
    assert truth.step_time_us[0] == pytest.approx(100000, rel=0.005)
    assert truth.straggler == 3 and truth.straggler_late_us == pytest.approx(8000, abs=1.0)
    assert truth.per_rank_us[0]["comm_sync_wait"] == pytest.approx(8000, abs=1.0)
    # the straggler shows the bare transfer, and its 8 ms as compute
    assert truth.per_rank[3]["comm"] == pytest.approx(0.32, abs=0.005)
    with pytest.raises(ValueError):
        scenario_from_shares(comm=0.1, comm_exposed=0.05, straggler_rank=1, straggler_extra_us=20000)


def test_target_mb_per_rank(tmp_path):
    truth = generate(Scenario(world_size=2, kernel_us=200.0, target_mb_per_rank=5), tmp_path, gzip=False)
    for r in range(2):
        size = (tmp_path / f"rank{r}.pt.trace.json").stat().st_size
        assert 3.5e6 <= size <= 6.5e6, size
        assert truth.bytes_per_rank[r] == size
    assert truth.steps > 1


def test_rank_override_makes_a_late_rank(tmp_path):
    sc = Scenario(world_size=3, steps=2, kernel_us=500.0, rank_overrides={1: {"dataloader_us": 7000.0}})
    assert sc.spec(1).dataloader_us == 7000.0 and sc.spec(0).dataloader_us == Scenario().dataloader_us
    truth = generate(sc, tmp_path, gzip=False)
    assert truth.straggler == 1 and truth.straggler_late_us == pytest.approx(5000.0, abs=1.0)
    assert truth.per_rank_us[1]["dataloader_wait"] == pytest.approx(7000.0, abs=1e-6)


@pytest.mark.parametrize(
    "kw",
    [
        dict(comm_overlap=0.0, buckets=1),
        dict(comm_overlap=1.0, buckets=6, comm_us=30000.0),
        dict(world_size=1, h2d_us=0.0, host_gap_us=0.0),
        dict(buckets=0, dataloader_us=0.0),
        dict(filler_cpu_ops_per_kernel=3, optimizer_us=0.0, straggler_rank=0, straggler_extra_us=3000.0),
    ],
)
def test_edge_scenarios_stay_consistent(tmp_path, kw):
    kw = {"world_size": 2, "steps": 2, "kernel_us": 600.0, **kw}
    truth = generate(Scenario(**kw), tmp_path, gzip=False)
    for r in range(kw["world_size"]):
        t = load(tmp_path / f"rank{r}.pt.trace.json")
        rts = {e["args"]["correlation"]: e["ts"] for e in xs(t, "cuda_runtime")}
        assert all(rts[g["args"]["correlation"]] < g["ts"] for g in xs(t) if g["cat"] in GPU_CATS)
        steps = recount(t)
        for k in ("compute", "comm", "comm_exposed", "memcpy", "dataloader_wait", "host_idle", "backward"):
            assert statistics.fmean(s[k] for s in steps) == pytest.approx(truth.per_rank_us[r][k], abs=0.01)
        assert sum(truth.per_rank[r][k] for k in EXCLUSIVE) == pytest.approx(1.0, abs=1e-9)


def test_jobs_write_identical_files(tmp_path):
    sc = Scenario(world_size=2, steps=1, kernel_us=1000.0)
    t1 = generate(sc, tmp_path / "a", gzip=False)
    t2 = generate(sc, tmp_path / "b", gzip=False, jobs=2)
    for r in range(2):
        name = f"rank{r}.pt.trace.json"
        a, b = ((tmp_path / d / name).read_text() for d in "ab")
        assert a.replace(str(tmp_path / "a"), "") == b.replace(str(tmp_path / "b"), "")  # traceName differs
    assert t1.per_rank == t2.per_rank


# ---------------------------------------------------------------- scenarios and CLI
def test_toml_round_trip(tmp_path):
    sc = Scenario(
        world_size=8,
        steps=7,
        first_step=3,
        buckets=5,
        comm_us=12345.5,
        straggler_rank=5,
        straggler_extra_us=2500.0,
        rank_overrides={2: {"dataloader_us": 9000.0}, 6: RankSpec(forward_us=1.0)},
        name="rt",
    )
    path = dump_scenario(sc, tmp_path / "s.toml")
    back = load_scenario(path)
    assert back == sc
    assert back.spec(6).forward_us == 1.0 and back.spec(6).backward_us == RankSpec().backward_us
    (tmp_path / "multi.toml").write_text("world_size = 4\n[[rank_overrides]]\nranks = [1, 3]\nh2d_us = 5\n")
    assert load_scenario(tmp_path / "multi.toml").rank_overrides == {1: {"h2d_us": 5.0}, 3: {"h2d_us": 5.0}}
    (tmp_path / "bad.toml").write_text("world_size = 4\nbogus = 1\n")
    with pytest.raises(ValueError):
        load_scenario(tmp_path / "bad.toml")


@pytest.mark.parametrize("name", ["dataloader_bound", "straggler_rank3"])
def test_example_scenarios_load(name):
    sc = load_scenario(SCENARIOS / f"{name}.toml")
    assert sc.name == name and sc.world_size == 4
    if name == "straggler_rank3":
        assert sc.straggler_rank == 3 and sc.straggler_extra_us == 8000.0
    else:
        assert sc.dataloader_us == 30000.0


def test_cli(tmp_path):
    scen = tmp_path / "tiny.toml"
    scen.write_text("world_size = 2\nsteps = 1\nkernel_us = 1000.0\nstraggler_rank = 1\nstraggler_extra_us = 500.0\n")
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor_synth", str(scen), str(tmp_path / "o"), "--no-gzip"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        check=True,
    )
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and "2 ranks x 1 steps" in lines[0] and "straggler rank 1" in lines[0]
    assert (tmp_path / "o" / "rank1.pt.trace.json").exists() and (tmp_path / "o" / "truth.json").exists()
