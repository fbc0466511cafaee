"""torch.compile recompilation evidence: the capture part (capture/agent/compile.py) on built
Dynamo records, the sampler's ``compile`` phase (capture/agent/stacks.py), the patched calls that
Dynamo traces (capture/agent/patches.py), and the bundle facts (bundle/compile.py)."""

import os
import sys
import threading
import time
from types import SimpleNamespace

from ddpdoctor.bundle.compile import compile_facts
from ddpdoctor.capture.agent import compile as ac
from ddpdoctor.capture.agent import patches as ap
from ddpdoctor.capture.agent import stacks as st


def metric(start_us, end_us, compile_id, reason=None, frame=True):
    """One of Dynamo's CompilationMetrics records (the attributes agent_compile reads)."""
    return SimpleNamespace(
        start_time_us=start_us,
        end_time_us=end_us,
        compile_id=compile_id,
        recompile_reason=reason,
        frame_key="1" if frame else None,
        entire_frame_compile_time_s=(end_us - start_us) / 1e6 if frame else None,
    )


# ------------------------------------------------------------------ capture (pure parts)


def test_guard_text_drops_id_source_line_and_stack():
    assert (
        ac.guard_text("0/3: tensor 'x' size mismatch at index 1. expected 40, actual 57")
        == "tensor 'x' size mismatch at index 1. expected 40, actual 57"
    )
    # torch 2.13's text for a guard on a Python attribute (measured: the agent's own flag, before the fix)
    raw = (
        "0/1: self.evidence.in_window == False # if self.in_window: # /tmp/x/agent_evidence.py:315 in "
        'forward_entered User stack trace: File "agent.py", line 217'
    )
    assert ac.guard_text(raw) == "self.evidence.in_window == False"
    assert ac.guard_text("") == ""


def test_window_compilations_per_step_and_grouped_reasons():
    bounds = [1_000_000, 2_000_000, 3_000_000, 4_000_000]  # window start + 3 step ends (µs)
    metrics = [
        metric(500_000, 900_000, "0/0"),  # before the window: not counted
        metric(1_100_000, 1_700_000, "0/1", "0/0: tensor 'x' size mismatch at index 1. expected 9, actual 10"),
        metric(1_750_000, 1_760_000, "0/1", frame=False),  # lazy backward compile: time only
        metric(2_100_000, 2_500_000, "0/2", "0/1: tensor 'x' size mismatch at index 1. expected 10, actual 11"),
        metric(4_100_000, 4_200_000, "0/3", "late"),
    ]  # after the window
    events = ac.compile_events(metrics, bounds[0], bounds[-1])
    assert [e["kind"] for e in events] == ["frame", "backward", "frame"]
    rec = ac.summarize(events, bounds, 8)
    assert rec["steps"] == [
        {"compiles": 1, "compile_ms": 610.0},
        {"compiles": 1, "compile_ms": 400.0},
        {"compiles": 0, "compile_ms": 0.0},
    ]
    assert rec["compiles"] == 2 and rec["recompiles"] == 2 and rec["compile_ms"] == 1010.0
    assert rec["window_ms"] == 3000.0 and rec["recompile_limit"] == 8
    # one guard failing with new values each step is one reason; the latest instance is kept
    assert rec["reasons"] == [
        {
            "guard": "tensor 'x' size mismatch at index 1",
            "count": 2,
            "example": "tensor 'x' size mismatch at index 1. expected 10, actual 11",
        }
    ]


def test_without_torch_compile_nothing_is_read_or_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch._dynamo.utils", raising=False)
    before = set(sys.modules)
    w = ac.CompileWatch()
    w.window_start()
    w.step()
    w.window_stop()
    assert w.record() == {"used": False}
    assert not any(m.startswith("torch._dynamo") for m in set(sys.modules) - before)


def test_watch_reads_dynamo_records_of_the_window(monkeypatch):
    recs = []
    fake = SimpleNamespace(get_compilation_metrics=lambda: list(recs))
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", fake)
    monkeypatch.setitem(sys.modules, "torch._dynamo.config", SimpleNamespace(recompile_limit=8))
    w = ac.CompileWatch()
    w.window_start()
    now = time.time_ns() // 1000
    recs.append(metric(now + 10, now + 20, "0/4", "0/3: tensor 'x' size mismatch at index 0. expected 3, actual 5"))
    time.sleep(0.01)
    w.step()
    w.window_stop()
    r = w.record()
    assert r["used"] and r["compiles"] == 1 and r["steps"][0]["compiles"] == 1 and r["recompile_limit"] == 8
    assert len(r["steps"]) == 2 and r["steps"][1]["compiles"] == 0


# ------------------------------------------------------------------ the sampler: compile frames are not input work


def _frame_in(module: str, body: str):
    """A function whose frames carry ``__name__ == module`` (as torch/_dynamo/convert_frame.py's do)."""
    ns = {"__name__": module}
    exec(compile(body, f"<{module}>", "exec"), ns)
    return ns


def test_sampler_tags_dynamo_compilation_as_compile_phase():
    conv = _frame_in(
        "torch._dynamo.convert_frame", "def _compile(stop):\n    while not stop.is_set():\n        sum(range(200))\n"
    )

    def spin(stop):  # user code calls into the "compiler"
        conv["_compile"](stop)

    stop = threading.Event()
    t = threading.Thread(target=spin, args=(stop,), daemon=True)
    t.start()
    here = os.path.dirname(os.path.abspath(__file__))
    s = st.StackSampler(
        t.ident, 0.002, os.path.dirname(here), agent_dir=os.path.dirname(st.__file__), phase_of=lambda: "input"
    )
    try:
        for _ in range(40):
            s.sample()
            time.sleep(0.002)
    finally:
        stop.set()
        t.join()
    phases = {r["phase"] for r in s.records() if r["func"] == "spin"}
    assert phases == {"compile"}, s.records()
    out = s.summary(0.2, 2, forwards=2)
    assert out["phases"].get("compile", 0) > 0 and out["input"]["ms_per_step"] == 0
    assert all(sig["func"] != "spin" for sig in out["signatures"])


def test_aggregate_keeps_compile_out_of_input_work():
    recs = [
        {
            "lib": "torch._dynamo.convert_frame._compile",
            "func": "main",
            "file": "train.py",
            "line": 88,
            "phase": "compile",
            "sync": False,
            "count": 90,
        },
        {"lib": None, "func": "main", "file": "train.py", "line": 87, "phase": "input", "sync": False, "count": 10},
    ]
    out = st.aggregate(recs, samples=100, wall_s=1.0, steps=5, forwards=5)
    assert out["phases"] == {"compile": 180.0, "input": 20.0}
    assert out["input"]["ms_per_step"] == 20.0 and out["input"]["where"] == "main (train.py:87)"


# ------------------------------------------------------------------ patched calls that Dynamo traces


def test_patched_call_traced_by_dynamo_runs_only_the_original():
    calls = []

    class Owner:
        def forward(self, x):
            return x + 1

    ap.wrap(Owner, "forward", before=lambda *a, **k: calls.append("hook"), on_error=None, place="t")
    try:
        ap.set_compile_check(lambda: True)
        assert Owner().forward(1) == 2 and calls == []
        ap.set_compile_check(lambda: False)
        assert Owner().forward(1) == 2 and calls == ["hook"]
        ap.set_compile_check(None)  # torch without torch.compiler: hooks run
        assert Owner().forward(1) == 2 and calls == ["hook", "hook"]
    finally:
        ap.set_compile_check(None)


# ------------------------------------------------------------------ bundle facts


def _settings(compiles, compile_ms, window_ms=1000.0, steps=5, reasons=None, limit=8):
    per = [
        {"compiles": 1 if i < compiles else 0, "compile_ms": compile_ms / max(compiles, 1) if i < compiles else 0.0}
        for i in range(steps)
    ]
    return {
        "compile": {
            "used": True,
            "steps": per,
            "compiles": compiles,
            "compile_ms": compile_ms,
            "window_ms": window_ms,
            "reasons": reasons or [],
            "recompile_limit": limit,
        }
    }


def test_compile_facts_median_over_ranks_and_top_reason():
    g = "tensor 'x' size mismatch at index 1"
    ranks = {
        0: _settings(3, 600.0, reasons=[{"guard": g, "count": 3, "example": g + ". expected 9, actual 10"}]),
        1: _settings(
            3,
            500.0,
            reasons=[
                {"guard": g, "count": 3, "example": g + ". expected 10, actual 11"},
                {"guard": "other", "count": 1, "example": "other"},
            ],
        ),
    }
    f = compile_facts(ranks)
    assert f["compile.used"] is True and f["compile.window_compiles"] == 3 and f["compile.steps_compiling"] == 3
    assert f["compile.share"] == 0.55 and f["compile.share.per_rank"] == {0: 0.6, 1: 0.5}
    assert f["compile.ms_per_step"] == 110.0 and f["compile.recompile_limit"] == 8
    assert f["compile.reason"] == g + ". expected 10, actual 11" and f["compile.reason_count"] == 6
    assert f["compile.size_dim"] == 1


def test_compile_facts_absent_without_compile_or_record():
    assert compile_facts({0: {}, 1: {"compile": None}}) == {}
    f = compile_facts({0: {"compile": {"used": False}}, 1: {"compile": {"used": False}}})
    assert f == {"compile.used": False}
    # compiled before the window only: measured, zero
    f = compile_facts({0: _settings(0, 0.0)})
    assert f["compile.window_compiles"] == 0 and f["compile.share"] == 0.0 and "compile.reason" not in f
    assert "compile.size_dim" not in f
