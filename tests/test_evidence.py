"""Window evidence without a training run: the stack sampler's aggregation and naming, the
contention probes' parsing, batch fingerprints and sharding detection (capture side), and
the facts bundle/evidence.py computes from settings.json built in code (bundle side)."""

import json
import os
import threading
import time

import pytest

from ddpdoctor.bundle.evidence import contention_facts, data_facts, extra_work, python_facts, safe_where
from ddpdoctor.bundle.settings import load_bundle_facts
from ddpdoctor.capture.agent import contention as probes
from ddpdoctor.capture.agent import evidence as ev
from ddpdoctor.capture.agent import stacks as st
from ddpdoctor.resources import metric_params

PARAMS = metric_params()["evidence"]


# ------------------------------------------------------------------ aggregation (pure)


def rec(func, count, lib=None, line=10, phase="step", sync=False, file="train.py"):
    return {"lib": lib, "func": func, "file": file, "line": line, "phase": phase, "sync": sync, "count": count}


def test_aggregate_ms_per_step_signatures_functions_and_input():
    records = [
        rec("write_checkpoint", 30, lib="torch.save", line=41),
        rec("write_checkpoint", 10, line=42),
        rec("main", 40, lib="torch.Tensor.backward", line=60, sync=True),
        rec("decode", 15, lib="json.loads", line=30, phase="input"),
        rec("main", 5, line=55, phase="input"),
    ]
    out = st.aggregate(records, samples=100, wall_s=1.0, steps=10, forwards=10)
    assert out["sampled"] and out["ms_per_sample"] == 10.0 and out["step_ms"] == 100.0
    top = out["signatures"][0]
    assert top["where"] == "torch.Tensor.backward in main (train.py:60)" and top["sync"] and top["ms_per_step"] == 40.0
    funcs = {f["func"]: f for f in out["functions"]}
    # waits for peers (sync) are not a function's own time; a function sums its lines
    assert "main" in funcs and funcs["main"]["ms_per_step"] == 5.0
    assert funcs["write_checkpoint"]["ms_per_step"] == 40.0
    assert funcs["write_checkpoint"]["where"] == "torch.save in write_checkpoint (train.py:41)"
    assert out["phases"] == {"input": 20.0, "step": 80.0}
    assert out["input"]["ms_per_step"] == 20.0 and out["input"]["where"] == "json.loads in decode (train.py:30)"


def test_samples_of_ddpdoctors_own_work_are_not_charged_to_the_script():
    """acc27's one busy healthy_balanced miss: under a CPU burner the training thread sat 140 ms in
    threading.Thread.start at the window's first step (the agent starting its sampler thread from the
    optimizer hook), and IM001 named 'threading.Thread.start in main (healthy_balanced.py:45)' as rank 0's
    extra work. Samples taken while the agent works at a boundary are phase "capture": counted as time,
    charged to no line of the script."""
    records = [
        rec("main", 80, lib="torch.Tensor.backward", line=44, sync=True),
        rec("main", 14, lib="threading.Thread.start", line=45, phase="capture"),
        rec("main", 6, lib="torch.optim.Adam.step", line=45),
    ]
    out = st.aggregate(records, samples=100, wall_s=1.0, steps=10, forwards=10)
    assert all(s["lib"] != "threading.Thread.start" for s in out["signatures"]), out["signatures"]
    assert {f["func"]: f["ms_per_step"] for f in out["functions"]} == {"main": 6.0}
    assert out["phases"] == {"capture": 14.0, "step": 86.0} and out["ms_per_sample"] == 10.0
    e = ev.Evidence({}, st)
    e.phase = "step"
    prev = e.own_work_begins()
    assert e.phase == "capture"
    e.own_work_ends(prev)
    assert e.phase == "step"
    prev = e.own_work_begins()
    e.phase = "loader"  # a hook inside the boundary moved on: kept
    e.own_work_ends(prev)
    assert e.phase == "loader"


def test_aggregate_without_forward_or_samples():
    assert st.aggregate([rec("main", 3)], samples=3, wall_s=0.03, steps=1, forwards=0)["input"] is None
    assert st.aggregate([], samples=0, wall_s=1.0, steps=5, forwards=5)["sampled"] is False


# ------------------------------------------------------------------ the sampler on a real thread


def spin_in_named_function(stop):
    x = 0
    while not stop.is_set():
        for i in range(200):
            x += i * i


def call_json_dumps(stop):
    payload = {"k": list(range(2000))}
    while not stop.is_set():
        json.dumps(payload)


@pytest.mark.parametrize(
    "target, func, lib",
    [(spin_in_named_function, "spin_in_named_function", None), (call_json_dumps, "call_json_dumps", "json.dumps")],
)
def test_sampler_names_user_frame_and_library_call(target, func, lib):
    stop = threading.Event()
    t = threading.Thread(target=target, args=(stop,), daemon=True)
    t.start()
    here = os.path.dirname(os.path.abspath(__file__))
    s = st.StackSampler(
        t.ident, 0.002, os.path.dirname(here), agent_dir=os.path.dirname(st.__file__), phase_of=lambda: "input"
    )
    try:
        for _ in range(60):
            s.sample()
            time.sleep(0.002)
    finally:
        stop.set()
        t.join()
    recs = s.records()
    assert sum(r["count"] for r in recs) == s.samples == 60
    mine = [r for r in recs if r["func"] == func]
    assert sum(r["count"] for r in mine) >= 30, recs
    assert all(r["file"] == "tests/test_evidence.py" for r in mine)  # relative to the script folder
    if lib:
        assert max(mine, key=lambda r: r["count"])["lib"] == lib
    assert not any(os.path.isabs(r["file"]) for r in recs)


def test_public_name_of_torch_functions():
    torch = pytest.importorskip("torch")
    import torch.serialization as ser

    assert st.public_name(ser.save.__code__, "torch.serialization") == "torch.save"
    assert st.public_name(torch.Tensor.backward.__code__, "torch._tensor") == "torch.Tensor.backward"
    # nothing exposes it under a shorter path: the module's own name
    assert st.public_name(ser._is_path.__code__, "torch.serialization") == "torch.serialization._is_path"


# ------------------------------------------------------------------ contention probes


def test_proc_stat_and_loadavg_parsing():
    hz = probes._clock_ticks()
    t = probes.proc_stat_times("cpu  100 0 50 800 50 0 0 25 0 0\ncpu0 1 2 3 4\n")
    assert t == {"total_s": 1025 / hz, "idle_s": 850 / hz, "steal_s": 25 / hz}
    old = probes.proc_stat_times("cpu  100 0 50 800\n")  # an old kernel: no steal column
    assert old["steal_s"] is None and old["idle_s"] == 800 / hz
    assert probes.proc_stat_times("garbage") is None and probes.proc_stat_times(None) is None
    assert probes.runnable_tasks("0.50 0.40 0.30 3/512 4242\n") == 3
    assert probes.runnable_tasks("") is None and probes.runnable_tasks(None) is None


def test_contention_record_degrades_to_none():
    start = {
        "time": 10.0,
        "thread_ident": 1,
        "thread": None,
        "process": None,
        "children_cpu_s": None,
        "proc_stat": None,
    }
    stop = dict(start, time=11.0, thread_ident=2)
    out = probes.contention_record(start, stop, [], None, {})
    assert out["wall_s"] == 1.0 and out["thread"] is None and out["host"] is None
    assert out["process_cpu_s"] is None and out["children_cpu_s"] is None and out["local_world_size"] is None


def test_window_in_process_records_contention_and_stacks(monkeypatch):
    monkeypatch.setenv("DDPDOCTOR_SAMPLE_HZ", "200")
    e = ev.Evidence(dict(os.environ), st)
    e.window_start(None, 5)
    e.forward_entered()
    # spin until this thread has had 0.15 s of CPU, 0.3 s have passed and the sampler has taken 20 samples: on a
    # loaded host (another process on every CPU) a fixed 0.3 s of wall time gave the thread as little as 0.06 s of
    # CPU, and the sampler thread as few as 15 turns at 200 Hz
    t0, cpu0 = time.time(), time.thread_time()
    x = 0
    sampler = e._sampler
    while (
        time.time() - t0 < 0.3 or time.thread_time() - cpu0 < 0.15 or sampler.samples < 20
    ) and time.time() - t0 < 20:
        for i in range(1000):
            x += i
    wall = time.time() - t0
    e.window_stop(3)
    r = e.record()
    assert r["window_first_step"] == 5 and r["window_steps"] == 3
    c = r["contention"]
    assert 0.25 < c["wall_s"] < wall + 1.0
    if os.path.exists("/proc/stat"):
        assert c["host"]["total_s"] > 0 and c["thread"]["cpu_s"] > 0.1 and c["runnable_samples"]
    s = r["stacks"]
    assert s["sampled"] and s["samples"] >= 20 and s["steps"] == 3 and s["sampler_cpu_s"] is not None
    assert any(f["func"] == "test_window_in_process_records_contention_and_stacks" for f in s["functions"])


def test_sampler_rate_follows_the_step_time_unless_fixed():
    f = ev.sample_interval_s
    # 5 steps of 20 ms: ~50 samples over the window -> every 2 ms
    assert f(None, 0.020, 5) == pytest.approx(0.002)
    # 5 steps of 60 ms: 6 ms, between the bounds
    assert f(None, 0.060, 5) == pytest.approx(0.006)
    # long steps: never slower than 100 Hz; very short steps: never faster than 500 Hz
    assert f(None, 2.0, 5) == ev.MAX_INTERVAL_S and f(None, 0.001, 5) == ev.MIN_INTERVAL_S
    # no step seen before the window: 100 Hz
    assert f(None, None, 5) == ev.MAX_INTERVAL_S and f("", 0.02, None) == ev.MAX_INTERVAL_S
    # DDPDOCTOR_SAMPLE_HZ fixes it, 0 turns it off
    assert f("250", 0.020, 5) == pytest.approx(0.004) and f("0", 0.020, 5) is None


def test_window_samples_faster_for_short_steps(monkeypatch):
    monkeypatch.delenv("DDPDOCTOR_SAMPLE_HZ", raising=False)
    e = ev.Evidence(dict(os.environ), st)
    e.window_start(None, 5, 0.02, 5)
    time.sleep(0.05)
    e.window_stop(5)
    assert e.record()["stacks"]["interval_s"] == pytest.approx(0.002)


def test_window_without_stack_sampling(monkeypatch):
    monkeypatch.setenv("DDPDOCTOR_SAMPLE_HZ", "0")
    e = ev.Evidence(dict(os.environ), st)
    e.window_start(None, 0)
    time.sleep(0.15)
    e.window_stop(1)
    assert e.record()["stacks"]["sampled"] is False and "contention" in e.record()


# ------------------------------------------------------------------ batch fingerprints, sharding


def test_batch_fingerprints():
    fp = ev.batch_fingerprint
    assert fp({"a": 1, "b": "x"}) == fp({"b": "x", "a": 1})
    assert fp((1, "x", [2.0])) != fp((1, "x", [2.5])) and fp([b"abc"]) != fp([b"abd"])
    torch = pytest.importorskip("torch")
    x = torch.arange(64, dtype=torch.float32).reshape(4, 16)
    assert fp((x, torch.tensor([1, 2]))) == fp((x.clone(), torch.tensor([1, 2])))
    assert fp((x, torch.tensor([1, 2]))) != fp((x + 1, torch.tensor([1, 2])))
    assert fp(x) != fp(x.reshape(16, 4))  # shape is part of the content
    assert fp(x[:, ::2]) == fp(x[:, ::2].contiguous())  # strided views hash their values


def test_unhashable_batch_is_recorded_once_and_left_out():
    class Broken:
        shape, dtype = (2,), "float32"

        def data_ptr(self):
            raise RuntimeError("no storage")

    e = ev.Evidence({}, st)
    info = {}
    for _ in range(5):
        e.batch_returned(info, (Broken(),))
    assert info["batch_fingerprints"] == [None, None, None] and e.phase == "input"
    assert data_facts({0: loader(info["batch_fingerprints"]), 1: loader(["a"])}) == {}


class DistributedSampler:
    pass


class LightningSampler(DistributedSampler):
    pass


class BatchSamplerShard:
    pass


class FakeLoader:
    def __init__(self, sampler=None, batch_sampler=None, dataset=None):
        self.sampler, self.batch_sampler, self.dataset = sampler, batch_sampler, dataset


def test_sharded_by():
    # one detector for the whole agent (agent_settings), which records dataloader.sharded_by
    def sharded_by(loader):
        from ddpdoctor.capture.agent import settings as agent_settings

        return agent_settings._sharded_by(loader, loader.sampler, loader.batch_sampler)

    assert sharded_by(FakeLoader(sampler=LightningSampler())) == "DistributedSampler"
    assert sharded_by(FakeLoader(batch_sampler=BatchSamplerShard())) == "BatchSamplerShard"
    hf = type("IterableDataset", (), {"__module__": "datasets.iterable_dataset", "_distributed": object()})()
    assert sharded_by(FakeLoader(dataset=hf)) == "split_dataset_by_node"
    assert sharded_by(FakeLoader(sampler=type("DistributedBucketSampler", (), {})())) == "DistributedBucketSampler"
    plain = type("IterableDataset", (), {"__module__": "datasets.iterable_dataset", "_distributed": None})()
    assert sharded_by(FakeLoader(sampler=object(), dataset=plain)) is None


# ------------------------------------------------------------------ facts from settings.json built in code


def contention(
    total=2.0, idle=1.0, steal=0.0, cpu=0.4, children=0.1, nivcsw=50, wall=1.0, loads=(2, 2), threads=1, lws=2
):
    return {
        "wall_s": wall,
        "thread": {"cpu_s": cpu, "nivcsw": nivcsw, "nvcsw": 5},
        "process_cpu_s": cpu,
        "children_cpu_s": children,
        "host": {"total_s": total, "idle_s": idle, "steal_s": steal},
        "runnable_samples": list(loads),
        "host_cpus": 2,
        "affinity_cpus": 2,
        "torch_threads": threads,
        "local_world_size": lws,
    }


def settings(r, host="h0", affinity=(0, 1), **evidence):
    return {
        "schema": "ddpdoctor.settings/1",
        "rank": r,
        "hostname": host,
        "cpu_affinity": list(affinity),
        "evidence": evidence,
    }


def test_contention_facts_one_host():
    ranks = {
        0: settings(0, contention=contention(cpu=0.4, nivcsw=50)),
        1: settings(1, contention=contention(cpu=0.3, children=0.0, nivcsw=120, threads=2)),
    }
    f = contention_facts(ranks)
    assert f["host.contention.cpus_per_rank"] == 1.0 and f["host.contention.threads_per_cpu"] == 1.5
    # busy 50 % of the host's CPU time; the ranks used (0.4 + 0.1) / 2 + 0.3 / 2 = 40 %
    assert f["host.contention.other_busy_share"] == pytest.approx(0.1)
    assert f["host.contention.load_per_cpu"] == 1.0 and f["host.contention.steal_share"] == 0.0
    assert f["host.contention.involuntary_switches_per_s"] == 120.0
    assert f["host.contention.involuntary_switches_per_s.per_rank"] == {0: 50.0, 1: 120.0}


def test_contention_facts_absent_probes():
    bare = contention()
    bare.update(thread=None, host=None, process_cpu_s=None, runnable_samples=[], torch_threads=None)
    f = contention_facts({0: settings(0, affinity=(), contention=bare)})
    assert f == {"host.contention.cpus_per_rank": 1.0}  # affinity count / LOCAL_WORLD_SIZE only
    # a rank that could not measure its own CPU time: no other_busy_share (it would count the rank as "other")
    part = contention()
    part["process_cpu_s"] = None
    f = contention_facts({0: settings(0, contention=contention()), 1: settings(1, contention=part)})
    assert "host.contention.other_busy_share" not in f and "host.contention.load_per_cpu" in f
    f = contention_facts({0: settings(0, contention=contention(steal=None))})
    assert "host.contention.steal_share" not in f
    assert contention_facts({0: {"rank": 0}}) == {}


def test_contention_facts_busiest_host():
    ranks = {
        0: settings(0, "a", (0, 1, 2, 3), contention=contention(lws=1)),
        1: settings(1, "b", (0, 1), contention=contention(idle=0.2, lws=2)),
        2: settings(2, "b", (0, 1), contention=contention(idle=0.2, lws=2)),
    }
    f = contention_facts(ranks)
    assert f["host.contention.cpus_per_rank"] == 1.0
    assert f["host.contention.cpus_per_rank.per_rank"] == {0: 4.0, 1: 1.0, 2: 1.0}
    assert f["host.contention.other_busy_share"] == pytest.approx(0.9 - 0.5)


def stacks(functions, step_ms=100.0, steps=10, ms_per_sample=10.0, input_ms=None, input_where=None):
    s = {
        "sampled": True,
        "samples": int(step_ms * steps / ms_per_sample),
        "ms_per_sample": ms_per_sample,
        "step_ms": step_ms,
        "steps": steps,
        "functions": [
            {"func": fn, "file": "train.py", "where": f"{fn} (train.py:1)", "ms_per_step": ms}
            for fn, ms in functions.items()
        ],
    }
    s["input"] = (
        None
        if input_ms is None
        else {"ms_per_step": input_ms, "where": input_where, "top": [{"where": input_where, "ms_per_step": input_ms}]}
    )
    return s


def test_extra_work_names_the_rank_and_place():
    sampled = {0: stacks({"main": 20, "write_checkpoint": 30}), 1: stacks({"main": 21}), 2: stacks({"main": 19})}
    assert extra_work(sampled, PARAMS) == {
        "rank": 0,
        "where": "write_checkpoint (train.py:1)",
        "ms_per_step": 30.0,
        "share": 0.3,
    }


def test_extra_work_names_a_runner_up_line_that_holds_a_third_or_more():
    """Seen on rank0_checkpoint_every_step: os.replace of the 40 MB file (line 29, no Python callee)
    held 37-48 % of save_checkpoint's samples, so naming only the top line hid one or the other."""

    def sig(lib, line, count, sync=False):
        return {"lib": lib, "func": "save_checkpoint", "file": "train.py", "line": line, "count": count, "sync": sync}

    def rank0(sigs):
        st = stacks({"main": 20, "save_checkpoint": 60})
        st["functions"][1]["where"] = "save_checkpoint (train.py:29)"
        st["signatures"] = sigs
        return st

    others = {1: stacks({"main": 21}), 2: stacks({"main": 19})}
    split = rank0(
        [
            sig("", 29, 33),
            sig("torch.save", 28, 27),
            sig("", 30, 1),
            sig("torch.distributed.all_reduce", 31, 90, sync=True),
        ]
    )
    assert (
        extra_work({0: split, **others}, PARAMS)["where"]
        == "save_checkpoint (train.py:29; 44 % of it in torch.save at line 28)"
    )
    # the top line holds two thirds or more: it alone is the place
    mostly = rank0([sig("", 29, 40), sig("torch.save", 28, 20)])
    assert extra_work({0: mostly, **others}, PARAMS)["where"] == "save_checkpoint (train.py:29)"
    # no signatures recorded (an older bundle): the function's own place
    assert extra_work({0: rank0([]), **others}, PARAMS)["where"] == "save_checkpoint (train.py:29)"


def test_a_slower_optimizer_step_is_not_extra_work():
    # rank 0's loop spends 40 ms per step in Adam.step against 14 ms on rank 1 (a contended core):
    # every rank runs the optimizer step, so that is the same work done slower, not work of its own
    slow = stacks({"main": 40})
    slow["functions"][0]["where"] = "torch.optim.Adam.step in main (train.py:40)"
    assert extra_work({0: slow, 1: stacks({"main": 14})}, PARAMS) is None
    saving = stacks({"main": 40})
    saving["functions"][0]["where"] = "torch.save in main (train.py:44)"
    assert extra_work({0: saving, 1: stacks({"main": 14})}, PARAMS)["rank"] == 0


def test_extra_work_not_named_below_materiality():
    step = 100.0
    small = PARAMS["extra_work_min_share"] * step * 0.5  # half the share threshold
    assert extra_work({0: stacks({"main": 20, "log": small}), 1: stacks({"main": 20})}, PARAMS) is None
    # every rank spends it (ratio below extra_work_min_ratio): not one rank's extra work
    near = 30 * (PARAMS["extra_work_min_ratio"] - 0.5) / PARAMS["extra_work_min_ratio"]
    assert extra_work({0: stacks({"eval": 30}), 1: stacks({"eval": near})}, PARAMS) is None
    # too few samples: 2 samples of 10 ms over 1 step, above the share
    one_step = {0: stacks({"x": 20}, steps=1, step_ms=100), 1: stacks({}, steps=1, step_ms=100)}
    assert PARAMS["extra_work_min_samples"] > 2 and extra_work(one_step, PARAMS) is None
    assert extra_work({0: stacks({"x": 50})}, PARAMS) is None  # one rank: nothing to compare


def test_python_facts_input_work_and_absent():
    ranks = {
        r: settings(r, stacks=stacks({"main": 20}, input_ms=ms, input_where="decode (train.py:30)"))
        for r, ms in ((0, 30.0), (1, 40.0), (2, 50.0))
    }
    f = python_facts(ranks, PARAMS)
    assert f["python.sampled"] is True and "python.extra_work.rank" not in f
    # the input work every rank does: the least of the ranks (more on one rank is that rank's extra work)
    assert f["python.input_work.ms_per_step"] == 30.0 and f["python.input_work.share"] == 0.3
    assert f["python.input_work.where"] == "decode (train.py:30)"
    assert f["python.input_work.ms_per_step.per_rank"] == {0: 30.0, 1: 40.0, 2: 50.0}
    ranks = {0: settings(0, stacks={"sampled": False, "reason": "DDPDOCTOR_SAMPLE_HZ=0"})}
    assert python_facts(ranks, PARAMS) == {"python.sampled": False}
    assert python_facts({0: settings(0)}, PARAMS) == {}
    no_forward = {0: settings(0, stacks=stacks({"main": 1})), 1: settings(1, stacks=stacks({"main": 1}))}
    assert not any(k.startswith("python.input_work") for k in python_facts(no_forward, PARAMS))


def loader(fps, sharded=None):
    return {"schema": "ddpdoctor.settings/1", "dataloader": {"batch_fingerprints": fps, "sharded_by": sharded}}


def test_data_facts():
    assert data_facts({0: loader(["a", "b", "c"]), 1: loader(["a", "b", "c"])}) == {"data.same_first_batches": True}
    f = data_facts({0: loader(["a", "b"], "DistributedSampler"), 1: loader(["x", "y"], "DistributedSampler")})
    assert f == {"data.same_first_batches": False, "data.sharded_by": "DistributedSampler"}
    assert data_facts({0: loader(["a", "b", "c"]), 1: loader(["a"])})["data.same_first_batches"] is True
    assert data_facts({0: loader(["a"])}) == {}  # one rank: nothing to compare
    assert data_facts({0: {"dataloader": None}, 1: loader([])}) == {}


def test_safe_where_never_leaks_paths_or_secrets():
    assert safe_where("save in f (/home/alice/proj/train.py:3)") == "save in f (train.py:3)"
    assert safe_where("f (C:\\Users\\bob\\x.py:1)") == "f (x.py:1)"
    assert safe_where("forward (models/resnet.py:12)") == "forward (models/resnet.py:12)"  # relative: kept
    assert safe_where("hf_abcdefghijklmnopqrstuvwx (t.py:1)") == "<redacted>"
    assert safe_where(None) is None


def test_load_bundle_facts_reads_the_evidence(tmp_path):
    for r in (0, 1):
        d = tmp_path / "ranks" / f"rank{r}"
        d.mkdir(parents=True)
        s = settings(r, contention=contention(), stacks=stacks({"main": 20, **({"ckpt": 25} if r == 0 else {})}))
        s["dataloader"] = {"batch_fingerprints": ["a", "b", "c"], "sharded_by": None}
        (d / "settings.json").write_text(json.dumps(s))
    f = load_bundle_facts([str(tmp_path)])
    assert f["python.extra_work.rank"] == 0 and f["python.extra_work.where"] == "ckpt (train.py:1)"
    assert f["data.same_first_batches"] is True and "data.sharded_by" not in f
    assert f["host.contention.cpus_per_rank"] == 1.0


def test_longer_forward_on_one_rank_is_not_extra_work():
    # uneven inputs make rank 1's Encoder.forward longer: that is uneven work, not one-rank extra work
    ranks = {
        0: settings(0, stacks=stacks({"Encoder.forward": 10})),
        1: settings(1, stacks=stacks({"Encoder.forward": 60})),
    }
    assert "python.extra_work.rank" not in python_facts(ranks, PARAMS)
    ranks[1] = settings(1, stacks=stacks({"Encoder.forward": 10, "write_checkpoint": 50}))
    assert python_facts(ranks, PARAMS)["python.extra_work.rank"] == 1
