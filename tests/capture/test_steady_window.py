"""The window's steady start (issue 37): past --warmup the window waits until the newest DataLoader
iterator returned more batches than it prefetched at its start, within a bound; pure, no torch."""

import importlib.util
import queue
from pathlib import Path

CAPTURE = Path(__file__).resolve().parents[2] / "ddpdoctor" / "capture" / "agent"


def _part(name):
    spec = importlib.util.spec_from_file_location(f"test_steady_{name}", CAPTURE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


win = _part("window")
loader = _part("loader")


class FakeLoader:
    """A loader that returns one batch per step; ``prefetched`` batches queued at its start."""

    def __init__(self, prefetched):
        self.prefetched, self.returned = prefetched, 0

    def probe(self):
        return self.prefetched, self.returned, None


def _start_step(warmup, prefetched, steady_within=None, batches_per_step=1):
    w = win.StepWindow(warmup=warmup, active=3, steady_within=steady_within)
    fake = FakeLoader(prefetched)
    w.drain_probe = fake.probe
    for _ in range(500):
        fake.returned += batches_per_step
        b = w.optimizer_step(own=True, now=float(w.steps + 1))
        if b.action == win.START:
            w.started()
            return b.step + 1, w.steady
    return None, w.steady


def test_the_window_starts_once_the_prefetched_batches_are_used_up():
    # 14 workers x prefetch 2 = 28 batches: the 29th batch was requested after the start
    steps, st = _start_step(warmup=5, prefetched=28)
    assert steps == 29
    assert st["decided_by"] == "prefetch_used" and st["from_step"] == 29 and st["waited_steps"] == 24
    assert st["prefetched_batches"] == 28 and st["returned_batches"] == 29


def test_warmup_stays_a_floor_and_no_loader_changes_nothing():
    steps, st = _start_step(warmup=40, prefetched=8)
    assert steps == 40 and st["decided_by"] == "prefetch_used" and st["waited_steps"] == 0
    w = win.StepWindow(warmup=5, active=3)  # no loader at all: the old window
    starts = [w.optimizer_step(True, float(i)).action for i in range(1, 7)]
    assert starts.index(win.START) == 4 and w.steady["decided_by"] == "warmup"


def test_the_bound_starts_the_window_and_says_it_was_not_steady():
    steps, st = _start_step(warmup=5, prefetched=28, steady_within=10)
    assert steps == 15 and st["decided_by"] == "bound" and st["returned_batches"] == 15
    steps, st = _start_step(warmup=5, prefetched=28, steady_within=0)  # 0: the wait is off
    assert steps == 5 and st["decided_by"] == "bound"


def test_gradient_accumulation_drains_faster_per_step():
    steps, st = _start_step(warmup=2, prefetched=28, batches_per_step=4)
    assert steps == 8 and st["returned_batches"] == 32


def test_a_probe_that_fails_leaves_the_warmup_floor():
    w = win.StepWindow(warmup=3, active=2)

    def broken():
        raise RuntimeError("gone")

    w.drain_probe = broken
    acts = [w.optimizer_step(True, float(i)).action for i in range(1, 5)]
    assert acts.index(win.START) == 2


class FakeIter:
    def __init__(self, workers, prefetch, task_info, queued):
        self._num_workers, self._prefetch_factor, self._task_info = workers, prefetch, task_info
        self._data_queue = queue.Queue()
        for _ in range(queued):
            self._data_queue.put(object())


def test_loader_timing_counts_prefetched_returned_and_ready_batches():
    t = loader.LoaderTiming()
    assert t.drain_state() is None
    it = FakeIter(14, 2, {5: (0,), 6: (1, "batch"), 7: (2, "batch"), 8: (3,)}, queued=3)
    t.iterator_created(it)
    for _ in range(4):
        t.returned()
    assert t.drain_state() == (28, 4, 5)  # two held out of order + three in the result queue
    it2 = FakeIter(0, None, {}, 0)  # an in-process loader: nothing prefetched
    t.iterator_created(it2)
    assert t.drain_state()[:2] == (0, 0)
    assert loader.ready_batches(object()) is None


def test_a_job_that_ends_while_the_window_waits_says_so():
    w = win.StepWindow(warmup=5, active=3)
    fake = FakeLoader(28)
    w.drain_probe = fake.probe
    for _ in range(12):
        fake.returned += 1
        assert w.optimizer_step(own=True, now=float(w.steps + 1)).action == win.NONE or w.steps < 5
    assert w.steady["decided_by"] == "waiting" and w.steady["from_step"] is None
    assert w.steady["returned_batches"] == 12 and w.steady["prefetched_batches"] == 28


def test_run_names_the_wait_when_no_trace_was_recorded():
    from ddpdoctor.cli.run import _waiting_for_loader

    s = {
        "steps_completed": 12,
        "window": {"steady": {"decided_by": "waiting", "prefetched_batches": 28, "returned_batches": 12}},
    }
    line = _waiting_for_loader([s])
    assert line.startswith("training ended after 12 steps while the window waited for the loader's 28 prefetched")
    assert "--steady-within 0" in line and _waiting_for_loader([{"window": {}}]) is None


def test_the_bundle_reader_says_what_decided_the_window():
    from ddpdoctor.bundle.settings import _steady_facts

    def facts_of(steady):
        out: dict = {}
        _steady_facts({1: {"window": {"steady": steady}}, 0: {"window": {}}}, out)
        return out

    used = {"from_step": 29, "decided_by": "prefetch_used", "warmup": 5, "waited_steps": 24, "prefetched_batches": 28}
    f = facts_of(used)
    assert f["run.window.steady_from_step"] == 29 and f["run.window.prefetched_batches"] == 28
    assert f["run.window.steady_note"] == (
        "steady from step 29: the loader's 28 prefetched batches were used up "
        "(--warmup 5 alone would have started at step 5)"
    )
    bound = dict(used, decided_by="bound", from_step=8, returned_batches=8, steady_within=3)
    assert facts_of(bound)["run.window.steady_note"].startswith("not steady after 8 steps: the loader's 28")
    # no wait (a job without workers, or the buffer used up by --warmup): facts, no card line
    assert "run.window.steady_note" not in facts_of(dict(used, waited_steps=0))
    assert facts_of({"from_step": None, "decided_by": "waiting"}) == {}
