"""A GIL-holding C call named by the call the stack sampler's gap ended on (capture/agent/returned_call.py,
gil_places.py, gil.Gaps/summarize), on gaps and frames built in code; the facts that carry it
(bundle/gil_evidence.py); and the real thing in this process: pickle.dumps called from a
function here holds the GIL while the window's sampler runs."""

import dis
import json
import os
import pickle
import threading
import time

import pytest

from ddpdoctor.bundle.gil_evidence import gil_facts
from ddpdoctor.capture.agent import evidence as ev
from ddpdoctor.capture.agent import gil
from ddpdoctor.capture.agent import returned_call as rc
from ddpdoctor.capture.agent import stacks as st
from ddpdoctor.capture.agent.gil_places import RETURNED, call_place
from ddpdoctor.resources import metric_params

PARAMS = metric_params()["evidence"]
HERE = os.path.basename(__file__)


class Holder:
    def __init__(self):
        self.enc = json.JSONEncoder()


def snapshot(state):
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def encode(self, o):
    return self.enc.encode(o)


def call_local(f, x):
    return f(x.y)


def call_subscript(a):
    return a.b[0].c(1)


def call_with_branch(a):
    return json.dumps(a if a else 1)


def calls_of(fn) -> list:
    return [i for i in dis.get_instructions(fn) if i.opname in rc.CALL_OPS]


# ------------------------------------------------------------------ the call at an instruction


def test_the_called_expression_is_read_back_from_the_call():
    for fn, name in [(snapshot, "pickle.dumps"), (encode, "self.enc.encode"), (call_local, "f")]:
        found = calls_of(fn)
        assert found, fn
        for ins in found:  # 3.11 stops at PRECALL or CALL: both name the same call
            assert rc.at_call(fn.__code__, ins.offset)
            assert rc.callee(fn.__code__, ins.offset) == name, (fn, ins.opname)


def test_no_name_when_the_callable_is_not_a_dotted_name_or_the_arguments_branch():
    for fn in (call_subscript, call_with_branch):
        assert [rc.callee(fn.__code__, i.offset) for i in calls_of(fn)] == [None] * len(calls_of(fn))


def test_an_instruction_that_is_not_a_call():
    first = next(iter(dis.get_instructions(snapshot)))
    assert not rc.at_call(snapshot.__code__, first.offset)
    assert rc.callee(snapshot.__code__, first.offset) is None
    assert not rc.at_call(snapshot.__code__, 10_000) and rc.callee(snapshot.__code__, 10_000) is None


# ------------------------------------------------------------------ gaps


class NoWait:
    """The sampler thread's schedstat, never in the run queue."""

    first = last = 0.0
    error = None

    def read(self):
        return (0.0, 1)


def sampler():
    return st.StackSampler(threading.get_ident(), 0.010, os.path.dirname(__file__), "/nowhere/agent", lambda: "step")


def user_key(fn, line_offset=1, lib_code=None):
    return (lib_code, fn.__code__, fn.__code__.co_firstlineno + line_offset, "step", False)


def test_a_gap_that_ended_on_a_call_names_it_from_a_lower_bar():
    s = sampler()
    gaps = gil.Gaps(0.010, clock=NoWait(), switch_s=0.005)
    assert gaps.threshold == pytest.approx(0.040) and gaps.call_threshold == pytest.approx(0.020)
    code, call = snapshot.__code__, calls_of(snapshot)[0].offset
    key = user_key(snapshot)
    gaps.seen(1.000, key, 0, (code, 0))
    gaps.seen(1.030, key, 0, (code, call))  # 30 ms, ended as pickle.dumps returned: recorded
    gaps.seen(1.060, key, 0, (code, 0))  # 30 ms, ended elsewhere: below the bar of an unexplained gap
    gaps.seen(1.130, key, 0, (code, 0))  # 70 ms, ended elsewhere: starvation, named by nothing
    gaps.seen(1.145, key, 0, (code, call))  # 15 ms: within one switch interval of the request
    out = gil.summarize(gaps, None, None, False, s, 1, steps=1, native_info={"sampler": None})
    assert out["gaps"] == 2
    assert [g["cause"] for g in out["listed"]] == ["call", "unnamed"]
    (c,) = out["calls"]
    assert c["where"] == f"pickle.dumps in snapshot ({HERE}:{key[2]})" and c["source"] == RETURNED
    assert c["gaps"] == 1 and c["ms_per_step"] == pytest.approx(20.0)
    assert out["starved_ms_per_step"] == {"gc": 0.0, "call": 20.0, "unnamed": 60.0}


def test_a_short_gap_on_a_call_that_the_run_queue_covers_is_cpu_starvation():
    class Waited(NoWait):
        values = [(0.0, 1), (0.014, 2)]

        def read(self):
            return self.values.pop(0)

    gaps = gil.Gaps(0.010, clock=Waited(), switch_s=0.005)
    code, call = snapshot.__code__, calls_of(snapshot)[0].offset
    gaps.seen(1.000, user_key(snapshot), 0, (code, 0))
    gaps.seen(1.025, user_key(snapshot), 0, (code, call))
    out = gil.summarize(gaps, None, None, False, sampler(), 1, steps=1, native_info={"sampler": None})
    assert out["listed"][0]["cause"] == "cpu" and not out["calls"]


def test_a_gap_the_sampler_spent_on_its_own_work_is_no_starvation():
    """Measured on thread_oversubscription: a 50 ms gap with no run-queue wait and no timeslice (the sampler
    thread ran throughout, reading /proc) had been put on DDP.forward, where the training thread happened to
    be.  Its own time on a CPU is taken off first; what is left is below the bar."""

    class Ran(NoWait):
        values = [(0.0, 10, 1.0), (0.0, 10, 1.045)]

        def read(self):
            return self.values.pop(0)

    gaps = gil.Gaps(0.010, clock=Ran(), switch_s=0.005)
    code, call = snapshot.__code__, calls_of(snapshot)[0].offset
    gaps.seen(1.000, user_key(snapshot), 0, (code, 0))
    gaps.seen(1.050, user_key(snapshot), 0, (code, call))
    out = gil.summarize(gaps, None, None, False, sampler(), 1, steps=1, native_info={"sampler": None})
    (gap,) = out["listed"]
    assert gap["cause"] == "own" and gap["own_ms"] == pytest.approx(45.0) and not out["calls"]
    assert out["cpu_gaps"] == 0 and sum(out["starved_ms_per_step"].values()) == 0


def test_a_call_made_inside_a_library_keeps_the_library_function_it_entered():
    s = sampler()
    s._kinds[json.dumps.__code__] = ("lib", "json", False)
    iterencode = json.JSONEncoder.iterencode
    top = (iterencode.__code__, calls_of(iterencode)[-1].offset)
    key = user_key(encode, lib_code=json.dumps.__code__)
    place = call_place(s, key, top)
    assert gil.where_text(place) == f"json.dumps in encode ({HERE}:{key[2]})"
    assert call_place(s, key, (iterencode.__code__, 0)) is None  # not on a call: names nothing


# ------------------------------------------------------------------ facts


def test_facts_name_the_call_its_gaps_ended_on():
    def rank(r, calls):
        return {"rank": r, "evidence": {"stacks": {"step_ms": 200.0}, "gil": {"calls": calls}}}

    named = {"where": "pickle.dumps in snapshot (t.py:34)", "gaps": 5, "ms_per_step": 50.0, "source": RETURNED}
    f = gil_facts({0: rank(0, [named]), 1: rank(1, [])}, PARAMS)
    assert f["python.gil_held.where"] == named["where"] and f["python.gil_held.source"] == RETURNED
    assert f["python.gil_held.ms_per_step"] == 50.0 and f["python.gil_held.gaps"] == 5


# ------------------------------------------------------------------ in this process


def test_window_names_pickle_dumps_called_here(tmp_path):
    """The window's sampler at 100 Hz while this thread runs pickle.dumps (tens of ms, GIL held) between
    short sleeps: the gaps end as pickle.dumps returns and name it with the line that called it."""
    state = {i: {"seen": 0, "losses": [0.0] * 8, "tags": ["train", f"shard-{i % 64}"]} for i in range(150_000)}
    env = dict(os.environ, DDPDOCTOR_SAMPLE_HZ="100")
    env.pop("DDPDOCTOR_NATIVE_SAMPLER", None)
    e = ev.Evidence(env, st, gil, work_dir=str(tmp_path), step_of=lambda: 0)
    e.window_start(os.path.dirname(__file__), 0)
    took = []
    for _ in range(6):
        time.sleep(0.03)
        t0 = time.perf_counter()
        snapshot(state)
        took.append(time.perf_counter() - t0)
    e.window_stop(6)
    g = e.record()["gil"]
    assert g["native"]["sampler"] is None
    if min(took) < 0.030:
        pytest.skip(f"pickle.dumps took {min(took) * 1000:.0f} ms here: too short to starve a 100 Hz sampler")
    where = f"pickle.dumps in snapshot ({HERE}:{snapshot.__code__.co_firstlineno + 1})"
    named = [x for x in g["listed"] if x.get("where") == where]
    assert named and all(x["source"] == RETURNED for x in named), g["listed"]
    assert g["calls"][0]["where"] == where, g["calls"]
