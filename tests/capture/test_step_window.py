"""The capture agent's step window (ddpdoctor/capture/agent/window.py) as a pure state machine: step
events in, start/step/stop/exit decisions out.  No torch, no clock: times are passed in."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

CAPTURE = Path(__file__).resolve().parents[2] / "ddpdoctor" / "capture" / "agent"


def _part(name):
    spec = importlib.util.spec_from_file_location(f"test_capture_{name}", CAPTURE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


win = _part("window")
NONE, START, STEP, STOP, EXIT = win.NONE, win.START, win.STEP, win.STOP, win.EXIT


class Driver:
    """Plays the agent: carries out START / STOP like the agent does when the profiler works."""

    def __init__(self, w, start_works=True):
        self.w, self.start_works, self.log = w, start_works, []

    def act(self, b):
        if b is None:
            return None
        self.log.append((b.step, b.action))
        if b.action == START and self.start_works:
            self.w.started()
        elif b.action == STOP:
            self.w.stopped()
        return b

    def optimizer_steps(self, n, t0=0.0, dt=1.0):
        return [self.act(self.w.optimizer_step(True, t0 + dt * (i + 1))) for i in range(n)]


def actions(boundaries):
    return [b.action for b in boundaries]


def test_loading_the_window_imports_no_torch():
    code = (
        f"import importlib.util, sys; s = importlib.util.spec_from_file_location('w', {str(CAPTURE / 'window.py')!r}); "
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_wait_warmup_active_then_end_the_rank():
    w = win.StepWindow(warmup=3, active=4)
    d = Driver(w)
    bs = d.optimizer_steps(8)
    # boundaries 1, 2: warm-up; the 3rd completes it and starts; 4 recorded steps, the last stops
    assert actions(bs) == [NONE, NONE, START, STEP, STEP, STEP, STOP, NONE]
    assert [b.step for b in bs] == list(range(8))
    assert bs[6].then_exit and not bs[5].then_exit
    assert w.first_step == 3 and w.recorded == 4 and w.complete and w.window_done and not w.profiling
    assert w.steps == 8 and w.step_source == "optimizer"


def test_warmup_zero_records_from_the_second_step():
    w = win.StepWindow(warmup=0, active=2)
    bs = Driver(w).optimizer_steps(4)
    assert actions(bs) == [START, STEP, STOP, NONE] and w.first_step == 1


def test_settings_are_clamped():
    w = win.StepWindow(warmup=-3, active=0, forward_fallback=0)
    assert (w.warmup, w.active, w.forward_fallback) == (0, 1, 2)
    bs = Driver(w).optimizer_steps(3)
    assert actions(bs) == [START, STOP, NONE]


def test_one_window_per_run_even_when_training_goes_on():
    w = win.StepWindow(warmup=1, active=2, keep_going=True)
    bs = Driver(w).optimizer_steps(10)
    assert actions(bs) == [START, STEP, STOP] + [NONE] * 7
    assert not bs[2].then_exit and w.complete and w.recorded == 2


def test_a_start_not_carried_out_is_asked_again():
    w = win.StepWindow(warmup=2, active=2)
    d = Driver(w, start_works=False)
    bs = d.optimizer_steps(4)
    assert actions(bs) == [NONE, START, START, START] and w.first_step is None and w.recorded == 0
    d.start_works = True
    b = d.act(w.optimizer_step(True, 10.0))
    assert b.action == START and w.first_step == 5


def test_early_exit_inside_the_window_flushes_an_incomplete_window():
    w = win.StepWindow(warmup=2, active=5)
    d = Driver(w)
    d.optimizer_steps(4)  # started at the 2nd boundary, 2 steps recorded
    assert w.profiling and w.recorded == 2
    assert w.exit() is True  # the agent stops and exports (complete: false)
    w.stopped()
    assert not w.complete and w.window_done and w.recorded == 2
    assert w.exit() is False


def test_exit_before_or_after_the_window_has_nothing_to_flush():
    w = win.StepWindow(warmup=5, active=2)
    Driver(w).optimizer_steps(3)
    assert w.exit() is False
    w = win.StepWindow(warmup=1, active=1)
    Driver(w).optimizer_steps(3)
    assert w.exit() is False and w.complete


def test_boundaries_after_the_stop_request_end_the_rank_again():
    w = win.StepWindow(warmup=1, active=1)
    d = Driver(w)
    bs = d.optimizer_steps(2)
    assert actions(bs) == [START, STOP] and bs[1].then_exit
    assert w.request_stop() is True and w.request_stop() is False
    b = w.optimizer_step(True, 5.0)  # a `finally` block that steps again
    assert b.action == EXIT


def test_the_scripts_own_profiler_stops_the_window_and_prevents_one():
    w = win.StepWindow(warmup=1, active=5)
    d = Driver(w)
    d.optimizer_steps(3)
    assert w.profiling
    assert w.user_profiler_starts() is True  # the agent stops its own profiler (profiling was True)
    w.stopped()
    assert w.user_profiler_starts() is False
    assert actions(d.optimizer_steps(5, t0=10)) == [NONE] * 5 and not w.complete
    w = win.StepWindow(warmup=3, active=2)
    assert w.user_profiler_starts() is True and not w.profiling
    assert actions(Driver(w).optimizer_steps(6)) == [NONE] * 6 and w.first_step is None


def test_only_the_first_optimizer_counts_steps():
    w = win.StepWindow(warmup=10, active=2)
    assert w.optimizer_step(True, 1.0).step == 0
    assert w.optimizer_step(False, 1.5) is None  # a second optimizer (a GAN's other one)
    assert w.optimizer_step(True, 2.0).step == 1 and w.steps == 2


def test_forward_calls_never_count_once_an_optimizer_stepped():
    w = win.StepWindow(warmup=1, active=2, forward_fallback=3)
    w.optimizer_step(True, 1.0)
    assert all(w.forward(True, 2.0 + i) is None for i in range(20))
    assert w.steps == 1 and w.step_source == "optimizer"


def test_forward_fallback_counts_steps_at_ddp_forward_calls():
    w = win.StepWindow(warmup=2, active=2, forward_fallback=4)
    d = Driver(w)
    assert [w.forward(True, float(i)) for i in range(1, 5)] == [None] * 4  # 4 calls: not more than 4
    b = d.act(w.forward(True, 5.0))
    assert b.switched and b.step == 0 and w.step_source == "ddp_forward"
    bs = [d.act(w.forward(True, 6.0 + i)) for i in range(4)]
    assert not any(x.switched for x in bs)
    assert actions(bs) == [START, STEP, STOP, NONE]
    assert w.optimizer_step(True, 20.0) is None and w.step_source == "ddp_forward"  # an optimizer later: ignored


def test_accumulation_micro_batches_per_optimizer_step():
    w = win.StepWindow(warmup=100, active=1)
    for _ in range(3):
        for i in range(4):
            w.forward(i == 3, 1.0)  # no_sync() for three micro-batches, sync on the last
        w.optimizer_step(True, 2.0)
    w.micro_batch(True)  # an FSDP root forward counts the same way
    w.optimizer_step(True, 3.0)
    assert w.micro_per_step == [4, 4, 4, 1] and w.synced_per_step == [1, 1, 1, 1]
    for _ in range(300):
        w.optimizer_step(True, 4.0)
    assert len(w.micro_per_step) == win.KEEP_ACCUMULATION == len(w.synced_per_step)


def test_step_durations_idle_and_typical_step():
    w = win.StepWindow(warmup=100, active=1, now=100.0)
    bs = [w.optimizer_step(True, t) for t in (130.0, 131.0, 133.0, 134.0)]
    assert bs[0].duration is None  # the first includes the script's setup
    assert [b.duration for b in bs[1:]] == [1.0, 2.0, 1.0]
    assert w.step_times == [30.0, 1.0, 2.0, 1.0] and w.step_time_values() == [1.0, 2.0, 1.0]
    assert w.typical_step_s() == 2.0 and w.idle_s(140.0) == 6.0 and w.last_step_time == 134.0
    for i in range(200):
        w.optimizer_step(True, 135.0 + i)
    assert len(w.step_times) == win.KEEP_STEP_TIMES and w.step_time_values() == w.step_times
    assert w.typical_step_s() == 1.0
    assert win.StepWindow().typical_step_s() == 1.0  # no step yet


@pytest.mark.parametrize("warmup, active, keep_going", [(0, 1, False), (2, 3, True), (5, 5, False), (7, 2, True)])
def test_the_window_covers_exactly_active_steps_after_warmup(warmup, active, keep_going):
    w = win.StepWindow(warmup=warmup, active=active, keep_going=keep_going)
    bs = Driver(w).optimizer_steps(warmup + active + 5)
    starts = [b.step for b in bs if b.action == START]
    recorded = [b.step for b in bs if b.action in (STEP, STOP)]
    assert starts == [max(warmup, 1) - 1]
    # ProfilerStep#N of the recorded steps: first_step (= steps at the start) onwards
    assert recorded == list(range(starts[0] + 1, starts[0] + 1 + active))
    assert w.first_step == starts[0] + 1 and w.complete
    assert [b.then_exit for b in bs if b.action == STOP] == [not keep_going]
