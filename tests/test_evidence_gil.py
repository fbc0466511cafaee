"""The time a Python sampler cannot see, without a training run: garbage collections timed by
gc.callbacks, the stack sampler's gaps and their attribution (GC, or the call faulthandler's C
watchdog names), the dumps' parsing, and the facts bundle/gil_evidence.py computes from
settings.json built in code; and the runnable tasks outside the job (host contention)."""

import dis
import gc
import json
import os
import pickle
import threading
import time

import pytest

from ddpdoctor.bundle.evidence import contention_facts
from ddpdoctor.bundle.gil_evidence import gc_facts, gil_facts
from ddpdoctor.capture.agent import contention as probes
from ddpdoctor.capture.agent import evidence as ev
from ddpdoctor.capture.agent import gil
from ddpdoctor.capture.agent import stacks as st
from ddpdoctor.resources import metric_params

PARAMS = metric_params()["evidence"]


class Node:
    def __init__(self):
        self.me = self


def _make_long_lived(n: int) -> list:
    return [{"i": i, "l": [i]} for i in range(n)]


# ------------------------------------------------------------------ capture side


def test_gc_recorder_times_every_collection_with_its_step():
    step = [7]
    rec = gil.GcRecorder(lambda: step[0])
    rec.start()
    try:
        keep = _make_long_lived(50_000)
        gc.collect()
        step[0] = 8
        gc.collect(0)
    finally:
        rec.stop()
    assert rec._callback not in gc.callbacks
    out = rec.record(steps=2)
    gens = out["by_generation"]
    assert gens["2"]["count"] >= 1 and gens["0"]["count"] >= 1
    full = [c for c in out["collections"] if c[0] == 2]
    assert full and full[0][4] == 7 and full[0][2] > 0  # [gen, start ms, ms, collected, step]
    assert set(out["per_step_ms"]) >= {"7", "8"}
    assert out["ms_per_step"] == pytest.approx(out["total_ms"] / 2, abs=0.01)
    assert all(e >= b for b, e in rec.spans) and len(rec.spans) == sum(g["count"] for g in gens.values())
    del keep


def test_gc_covered_time_of_an_interval():
    rec = gil.GcRecorder(lambda: 0)
    rec.spans = [(1.0, 1.1), (2.0, 2.05)]
    assert rec.covered_s(0.0, 3.0) == pytest.approx(0.15)
    assert rec.covered_s(1.05, 2.01) == pytest.approx(0.06)
    assert rec.covered_s(1.2, 1.9) == 0


DUMP = """Timeout (0:00:00.010000)!
Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/json/encoder.py", line 200 in encode
  File "/usr/lib/python3.11/json/__init__.py", line 238 in dumps
  File "/home/u/proj/train.py", line 52 in log_state
  File "/home/u/proj/train.py", line 80 in main
Timeout (0:00:00.010000)!
Current thread 0x00007f0000000001 (most recent call first):
  File "/home/u/proj/train.py", line 81 in main
"""


def test_parse_dumps_keeps_one_thread_innermost_first():
    stacks = gil.parse_dumps(DUMP, 0x7F0000000001)
    assert len(stacks) == 2
    assert stacks[0][0] == ("/usr/lib/python3.11/json/encoder.py", 200, "encode")
    assert stacks[0][2] == ("/home/u/proj/train.py", 52, "log_state")
    assert stacks[1] == [("/home/u/proj/train.py", 81, "main")]
    assert gil.parse_dumps(DUMP, 0x1234) == []


def _sampler(script_dir="/home/u/proj"):
    s = st.StackSampler(threading.get_ident(), 0.005, script_dir, agent_dir="/nowhere/agent", phase_of=lambda: "step")
    s._roots = ("/usr/lib/python3.11/",)
    return s


def test_dump_place_names_the_user_frame_and_the_library_call():
    s = _sampler()
    p = gil.dump_place(s, gil.parse_dumps(DUMP, 0x7F0000000001)[0])
    assert gil.where_text(p) == "json.dumps in log_state (train.py:52)"


class RunQueueClock:
    """A stand-in for the sampler thread's schedstat: the (run-queue seconds, timeslices) each ``read()``
    returns."""

    def __init__(self, *values):
        self.values = list(values)
        self.first = self.last = None
        self.error = None if values else "no schedstat"

    def read(self):
        v = self.values.pop(0) if self.values else None
        if v is not None:
            self.first = v[0] if self.first is None else self.first
            self.last = v[0]
        return v


def test_gaps_are_put_on_gc_or_on_the_named_call():
    s = _sampler()
    gaps = gil.Gaps(0.005, clock=RunQueueClock(*[(0.0, n) for n in range(5)]))  # no run-queue wait: the GIL
    assert gaps.threshold == pytest.approx(max(gil.GAP_FACTOR * 0.005, gil.GAP_MIN_S))
    rec = gil.GcRecorder(lambda: 0)
    rec.spans = [(10.0, 10.1)]  # a 100 ms collection
    half = len(DUMP.split("Timeout")[0]) + len(DUMP.split("Timeout")[1]) + len("Timeout")
    gaps.seen(9.99, None, 0)
    gaps.seen(10.105, None, 0)  # 115 ms gap, covered by the collection: GC
    gaps.seen(10.11, None, 0)  # 5 ms: no gap
    gaps.seen(10.20, None, half)  # 90 ms gap, one dump inside: json.dumps in log_state
    gaps.seen(10.205, None, half)
    out = gil.summarize(gaps, rec, DUMP, True, s, 0x7F0000000001, steps=2, native_info={"sampler": "x"})
    assert out["gaps"] == 2
    assert [g["cause"] for g in out["listed"]] == ["gc", "call"]
    assert out["cpu_starved_ms_per_step"] == 0.0 and out["cpu_gaps"] == 0
    assert [g["runqueue_ms"] for g in out["listed"]] == [0.0, 0.0]
    assert out["starved_ms_per_step"]["gc"] == pytest.approx((0.115 - 0.005) * 1000 / 2, abs=0.01)
    call = out["calls"][0]
    assert call["where"] == "json.dumps in log_state (train.py:52)" and call["source"] == "faulthandler"
    assert call["ms_per_step"] == pytest.approx((0.09 - 0.005) * 1000 / 2, abs=0.01)
    # no dumps (the watchdog off): the frame the sampler saw around the gap, or nothing named
    gaps2 = gil.Gaps(0.005, clock=RunQueueClock())  # no schedstat either: nothing is set apart
    gaps2.seen(1.0, None, 0)
    gaps2.seen(1.1, None, 0)
    out2 = gil.summarize(gaps2, None, None, False, s, 1, steps=1, native_info={"sampler": None})
    assert out2["listed"][0]["cause"] == "unnamed" and not out2["calls"]
    assert out2["cpu_starved_ms_per_step"] is None and out2["runqueue"] == {"read": False, "reason": "no schedstat"}
    assert out2["starved_ms_per_step"]["unnamed"] == pytest.approx(95.0, abs=0.01)


def _snapshot(state):
    return pickle.dumps(state)


def _call_offset(fn) -> int:
    return next(i.offset for i in dis.get_instructions(fn) if i.opname in ("CALL", "PRECALL", "CALL_FUNCTION"))


def _one_gap(runqueue_s: float, gc_span=None, slices=1):
    """One 100 ms gap (interval 5 ms) between two samples in one user frame, the sampler thread waiting
    `runqueue_s` of it in the run queue over `slices` timeslices; optionally a collection over `gc_span`."""
    s = _sampler()
    code, call = _snapshot.__code__, _call_offset(_snapshot)
    key = (None, code, _snapshot.__code__.co_firstlineno + 1, "step", False)
    gaps = gil.Gaps(0.005, clock=RunQueueClock((2.0, 10), (2.0 + runqueue_s, 10 + slices)))
    gaps.seen(1.0, key, 0, (code, 0))
    gaps.seen(1.1, key, 0, (code, call))  # the gap ended as the call in _snapshot returned
    rec = None
    if gc_span is not None:
        rec = gil.GcRecorder(lambda: 0)
        rec.spans = [gc_span]
    return gil.summarize(gaps, rec, None, False, s, 1, steps=1, native_info={"sampler": None})


def test_a_gap_covered_by_the_samplers_run_queue_wait_is_cpu_starvation_not_the_gil():
    out = _one_gap(0.095)  # runnable without a CPU for the whole excess (an oversubscribed host)
    assert out["listed"][0]["cause"] == "cpu" and out["listed"][0]["cpu_ms"] == pytest.approx(95.0)
    assert out["cpu_starved_ms_per_step"] == pytest.approx(95.0) and out["cpu_gaps"] == 1
    assert sum(out["starved_ms_per_step"].values()) == 0 and not out["calls"]
    assert out["runqueue"]["read"] and out["runqueue"]["ms_per_step"] == pytest.approx(95.0)
    # what is left beside the wait would not be a gap (5 + 8 ms < 20 ms): still CPU starvation
    out = _one_gap(0.087, slices=2)  # its own wake-up and one switch interval's wait for the GIL
    assert out["listed"][0]["cause"] == "cpu" and not out["calls"] and out["listed"][0]["timeslices"] == 2


def test_a_gap_without_run_queue_wait_is_gil_held_and_a_partial_one_counts_the_rest():
    out = _one_gap(0.0)
    assert out["listed"][0]["cause"] == "call" and out["cpu_starved_ms_per_step"] == 0.0
    assert out["calls"][0]["ms_per_step"] == pytest.approx(95.0)
    out = _one_gap(0.040)  # 40 ms in the run queue, 55 ms held by another thread
    assert out["listed"][0]["cause"] == "call" and out["cpu_starved_ms_per_step"] == pytest.approx(40.0)
    assert out["calls"][0]["ms_per_step"] == pytest.approx(55.0)
    assert out["starved_ms_per_step"]["call"] == pytest.approx(55.0)


def test_the_run_queue_wait_of_wakes_for_a_held_gil_stays_gil_time():
    """Measured on a busy host (pickle.dumps of a 60 k-entry dict in another thread): the sampler thread
    waited 395 ms in the run queue over 84 timeslices of an 804 ms gap, one wake per switch interval
    while the call held the GIL.  Only two timeslices' share of that wait is CPU starvation."""
    out = _one_gap(0.060, slices=15)
    assert out["cpu_starved_ms_per_step"] == pytest.approx(60.0 * 2 / 15, abs=0.01)
    assert out["listed"][0]["cause"] == "call"
    assert out["calls"][0]["ms_per_step"] == pytest.approx(95.0 - 8.0, abs=0.01)


def test_a_collection_in_the_gap_outranks_the_run_queue_wait():
    # a 100 ms collection holds the GIL over the gap; the sampler's wake-ups waited 30 ms for a CPU meanwhile
    out = _one_gap(0.030, gc_span=(0.99, 1.11))
    assert out["listed"][0]["cause"] == "gc" and out["cpu_starved_ms_per_step"] == 0.0
    assert out["starved_ms_per_step"]["gc"] == pytest.approx(95.0)


def test_thread_run_queue_reads_the_calling_threads_schedstat():
    if not os.path.exists(gil.SCHEDSTAT):
        pytest.skip("no /proc/thread-self/schedstat on this platform")
    got = []

    def reader():
        c = gil.ThreadRunQueue()
        got.extend([c.read(), c.read()])
        got.append(c.fd)
        c.close()
        got.append(c.fd)

    t = threading.Thread(target=reader)
    t.start()
    t.join()
    assert isinstance(got[0][0], float) and 0 <= got[0][0] <= got[1][0] and 1 <= got[0][1] <= got[1][1]
    assert 0 <= got[0][2] <= got[1][2]  # the thread's own time on a CPU, cumulative
    assert got[2] is not None and got[3] is None
    bad = gil.ThreadRunQueue("/nonexistent/schedstat")
    assert bad.read() is None and bad.read() is None and "FileNotFoundError" in bad.error


def test_window_in_process_records_gc_gaps_and_native_dumps(monkeypatch, tmp_path):
    """The real thing in this process: a full collection over many objects starves the sampler
    thread; the gap is put on GC, and faulthandler's watchdog wrote dumps meanwhile."""
    monkeypatch.setenv("DDPDOCTOR_SAMPLE_HZ", "200")
    monkeypatch.setenv("DDPDOCTOR_NATIVE_SAMPLER", "1")
    keep = _make_long_lived(300_000)
    # Only the main thread's explicit collection in the window: an automatic one can start in whichever thread
    # allocates, the sampler's included, and a sampler that runs the collection itself is on a CPU throughout
    # (CI at 64ff584: a 491 ms gap put on GC, rightly, with 1 timeslice and no run-queue wait).
    gc.collect()
    gc.disable()
    try:
        e = ev.Evidence(dict(os.environ), st, gil, work_dir=str(tmp_path), step_of=lambda: 3)
        e.window_start(None, 3)
        time.sleep(0.05)
        t0 = time.perf_counter()
        gc.collect()
        took = time.perf_counter() - t0
        time.sleep(0.05)
        e.window_stop(1)
    finally:
        gc.enable()
    r = e.record()
    assert not r.get("errors")
    assert r["gc"]["by_generation"]["2"]["count"] >= 1 and r["gc"]["per_step_ms"]["3"] > 0
    g = r["gil"]
    assert g["native"]["sampler"] == "faulthandler.dump_traceback_later" and g["native"]["arms"] >= 5
    assert not list(tmp_path.iterdir()), "the dump file is removed after the window"
    if os.path.exists(gil.SCHEDSTAT):
        assert g["runqueue"]["read"] and g["cpu_starved_ms_per_step"] is not None, g["runqueue"]
    if took >= 3 * gil.GAP_MIN_S:  # the collection was long enough to starve the sampler
        assert g["gaps"] >= 1 and g["starved_ms_per_step"]["gc"] > 0
        if g["runqueue"]["read"]:  # waiting for the GIL, the sampler woke every switch interval (5 ms)
            gc_gaps = [gap for gap in g["listed"] if gap["cause"] == "gc"]
            assert gc_gaps and all(gap["timeslices"] > gil.CPU_ONLY_SLICES for gap in gc_gaps), gc_gaps
        assert g["native"]["dumps"] >= 1, "the watchdog's alarm fired while the collection held the GIL"
    # off unless asked for
    monkeypatch.delenv("DDPDOCTOR_NATIVE_SAMPLER")
    e = ev.Evidence(dict(os.environ), st, gil, work_dir=str(tmp_path), step_of=lambda: 3)
    e.window_start(None, 3)
    time.sleep(0.05)
    e.window_stop(1)
    assert e.record()["gil"]["native"]["sampler"] is None
    del keep


def test_native_dumps_pause_around_fork(tmp_path):
    """A forked child must not inherit a watchdog thread that no longer exists: it would hang in exit."""
    n = gil.NativeDumps(str(tmp_path / "d.txt"), 0.05)
    assert n.start()
    try:
        pid = os.fork()
        if pid == 0:
            # what a normal exit does (faulthandler's unload): with the watchdog inherited, it waits forever
            import faulthandler

            faulthandler.cancel_dump_traceback_later()
            os._exit(0)
        deadline = time.time() + 10
        while time.time() < deadline:
            done, _status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.02)
        else:
            os.kill(pid, 9)
            pytest.fail("the forked child hung at exit")
        assert n.pauses >= 1
        time.sleep(0.1)
        n.arm()
        time.sleep(0.2)  # nobody re-arms it: the alarm fires once
    finally:
        text = n.stop()
    assert text.count("Timeout (") == 1


# ------------------------------------------------------------------ facts


def settings(r, host="h0", **evidence):
    return {"schema": "ddpdoctor.settings/1", "rank": r, "hostname": host, "cpu_affinity": [0, 1], "evidence": evidence}


def stacks(step_ms=160.0):
    return {"sampled": True, "step_ms": step_ms}


def gc_rec(ms_per_step, full=0, max_ms=0.0, steps=8):
    return {
        "ms_per_step": ms_per_step,
        "by_generation": {"2": {"count": full, "ms": full * max_ms, "max_ms": max_ms}},
        "per_step_ms": {str(i): ms_per_step for i in range(steps)},
    }


def test_gc_facts_name_the_rank_that_pauses():
    ranks = {
        0: settings(0, stacks=stacks(), gc=gc_rec(0.1)),
        1: settings(1, stacks=stacks(), gc=gc_rec(143.3, full=2, max_ms=582.0)),
    }
    f = gc_facts(ranks, PARAMS)
    assert f["python.gc.rank"] == 1 and f["python.gc.extra_ms_per_step"] == pytest.approx(143.2)
    assert f["python.gc.ms_per_step.per_rank"] == {0: 0.1, 1: 143.3}
    assert f["python.gc.full_collections"] == 2 and f["python.gc.max_pause_ms"] == 582.0
    assert f["python.gc.window_steps"] == 8 and f["python.gc.rank_ms_per_step"] == 143.3


def test_gc_facts_quiet_when_every_rank_pauses_alike_or_below_the_bar():
    same = {r: settings(r, stacks=stacks(), gc=gc_rec(40.0)) for r in (0, 1)}
    assert "python.gc.rank" not in gc_facts(same, PARAMS)
    # 6 ms more per step on a 160 ms step: under 5 % of the step
    small = {0: settings(0, stacks=stacks(), gc=gc_rec(1.0)), 1: settings(1, stacks=stacks(), gc=gc_rec(7.0))}
    f = gc_facts(small, PARAMS)
    assert "python.gc.rank" not in f and f["python.gc.ms_per_step"] == 7.0
    assert gc_facts({0: settings(0)}, PARAMS) == {}


def gil_rec(calls, starved=None, native="faulthandler.dump_traceback_later"):
    return {
        "calls": calls,
        "starved_ms_per_step": starved or {"gc": 0.0, "call": 0.0, "unnamed": 0.0},
        "native": {"sampler": native},
    }


def test_gil_facts_name_the_call_that_held_the_gil():
    call = {"where": "json.dumps in log_state (train.py:52)", "ms_per_step": 40.0, "gaps": 5, "source": "faulthandler"}
    ranks = {
        0: settings(0, stacks=stacks(140.0), gil=gil_rec([call], {"gc": 0.0, "call": 40.0, "unnamed": 1.0})),
        1: settings(1, stacks=stacks(140.0), gil=gil_rec([])),
    }
    f = gil_facts(ranks, PARAMS)
    assert f["python.gil_held.rank"] == 0 and f["python.gil_held.where"] == call["where"]
    assert f["python.gil_held.ms_per_step"] == 40.0 and f["python.gil_held.source"] == "faulthandler"
    assert f["python.sampler_starved_ms_per_step.per_rank"] == {0: 41.0, 1: 0.0}
    assert f["python.native_sampler"] == "faulthandler.dump_traceback_later"
    assert "python.sampler_cpu_starved_ms_per_step" not in f  # no rank recorded it (an older bundle)
    # a single gap is not a pattern
    once = dict(call, gaps=1)
    ranks[0]["evidence"]["gil"] = gil_rec([once])
    assert "python.gil_held.rank" not in gil_facts(ranks, PARAMS)
    # a gap that ends at time.sleep is not time.sleep's: it released the GIL (test_watch_live in CI: "Rank 1 holds
    # the GIL 6.2 ms per step in time.sleep" right after a 40 ms pure-Python function)
    sleep = dict(call, where="time.sleep in main (watch_train.py:69)")
    ranks[0]["evidence"]["gil"] = gil_rec([sleep])
    assert "python.gil_held.rank" not in gil_facts(ranks, PARAMS)


def test_gil_facts_count_cpu_starvation_apart():
    """thread_oversubscription: rank 0's sampler starved 27 ms per step, all of it in the run queue; the
    capture put none of it on a call, so no GIL-held call is named and the starvation is its own fact."""
    starved = gil_rec([], {"gc": 0.0, "call": 0.0, "unnamed": 0.0}, native=None)
    ranks = {
        0: settings(0, stacks=stacks(290.0), gil={**starved, "cpu_starved_ms_per_step": 27.5}),
        1: settings(1, stacks=stacks(290.0), gil={**starved, "cpu_starved_ms_per_step": 0.4}),
    }
    f = gil_facts(ranks, PARAMS)
    assert "python.gil_held.rank" not in f and f["python.sampler_starved_ms_per_step"] == 0.0
    assert f["python.sampler_cpu_starved_ms_per_step"] == 27.5
    assert f["python.sampler_cpu_starved_ms_per_step.per_rank"] == {0: 27.5, 1: 0.4}


def test_runnable_tasks_outside_the_job():
    def con(loads, own):
        return {
            "wall_s": 1.0,
            "process_cpu_s": 0.9,
            "children_cpu_s": 0.0,
            "runnable_samples": list(loads),
            "own_runnable_samples": list(own),
            "host": {"total_s": 2.0, "idle_s": 0.1, "steal_s": 0.0},
            "host_cpus": 2,
            "affinity_cpus": 2,
            "torch_threads": 1,
            "local_world_size": 2,
        }

    # 3 runnable tasks on 2 CPUs, each rank ~1 of its own: 1 outside the job, 0.5 per CPU
    ranks = {r: settings(r, contention=con((3, 3), (1, 1))) for r in (0, 1)}
    f = contention_facts(ranks)
    assert f["host.contention.load_per_cpu"] == 1.5 and f["host.contention.other_runnable_per_cpu"] == 0.5
    # every runnable task is the job's own
    ranks = {r: settings(r, contention=con((3, 3), (2, 1))) for r in (0, 1)}
    assert contention_facts(ranks)["host.contention.other_runnable_per_cpu"] == 0.0
    # a rank that did not count its own: not computed
    ranks[1]["evidence"]["contention"]["own_runnable_samples"] = []
    assert "host.contention.other_runnable_per_cpu" not in contention_facts(ranks)


def test_own_runnable_threads_counts_this_process():
    n = probes.own_runnable_threads()
    if not os.path.isdir("/proc/self/task"):
        assert n is None
    else:
        assert isinstance(n, int) and n >= 0


def test_settings_round_trip(tmp_path):
    from ddpdoctor.bundle.settings import load_bundle_facts

    for r, g in ((0, gc_rec(0.1)), (1, gc_rec(60.0, full=3, max_ms=170.0))):
        d = tmp_path / "ranks" / f"rank{r}"
        d.mkdir(parents=True)
        (d / "settings.json").write_text(json.dumps(settings(r, stacks=stacks(), gc=g)))
    f = load_bundle_facts([str(tmp_path)])
    assert f["python.gc.rank"] == 1 and f["python.gc.extra_share"] == pytest.approx(59.9 / 160, abs=1e-3)
