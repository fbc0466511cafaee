"""Inside the DataLoader's workers (issue 39, item 1): the sample classification, the fetches' overlap, the
serialised-loader decision and the lock's place, on records built in code; and the capture probe's own file
(capture/agent/loader_workers.py) read back by the bundle reader, with a real sampler thread in this process."""

import json
import threading
import time
from pathlib import Path

import pytest

from ddpdoctor.bundle.loader_workers import (
    Frame,
    WorkerRecord,
    classify,
    fetch_overlap,
    held_gil,
    is_serialised,
    loader_worker_facts,
    read_worker_file,
    summarise_rank,
    unfinished_facts,
    unfinished_fetch,
)
from ddpdoctor.capture.agent import loader_workers as probe

PARAMS = {"loader_serial_min_overlap": 1.5, "loader_serial_max_progressing": 1.5, "loader_serial_min_lock_share": 0.25}
USER = Frame("/home/me/train.py", 66, "_read", "with self.lock:")
GETITEM = Frame("/home/me/train.py", 74, "__getitem__", "rec = self._read(i)")
FETCH = Frame("/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", 54, "fetch")
MP_LOCK = Frame("/usr/lib/python3.11/multiprocessing/synchronize.py", 95, "__enter__")
TOOL = Frame("/work/ddpdoctor/capture/agent/patches.py", 125, "wrapper")
LOCK_STACK = (MP_LOCK, TOOL, USER, GETITEM, FETCH)
SLEEP_STACK = (Frame("/home/me/train.py", 68, "_read"), GETITEM, FETCH)


@pytest.mark.parametrize(
    "call, cpu, stack, kind",
    [
        ("futex", 0.0, LOCK_STACK, "lock"),
        ("futex", 0.01, SLEEP_STACK, "lock"),  # a C-level lock (threading.Lock's with): no Python frame of its own
        (None, None, LOCK_STACK, "lock"),  # the call unreadable, multiprocessing's acquire innermost
        ("flock", 0.0, SLEEP_STACK, "lock"),
        ("clock_nanosleep", 0.0, SLEEP_STACK, "wait"),
        ("pread64", 0.02, SLEEP_STACK, "wait"),
        ("recvfrom", None, SLEEP_STACK, "wait"),
        ("running", None, SLEEP_STACK, "compute"),
        ("futex", 0.9, SLEEP_STACK, "compute"),  # computing in Python, seen waiting for the GIL the sampler holds
        ("nr999", 0.1, SLEEP_STACK, "other"),
    ],
)
def test_each_sample_is_classified(call, cpu, stack, kind):
    assert classify(call, cpu, stack) == kind


def test_overlap_counts_the_workers_in_a_fetch_at_once():
    assert fetch_overlap([(0, 1), (1, 2), (2, 3)]) == pytest.approx(1.0)
    assert fetch_overlap([(0, 2), (0, 2), (0, 2), (0, 2)]) == pytest.approx(4.0)
    assert fetch_overlap([(0, 2), (1, 3)]) == pytest.approx(4 / 3)
    assert fetch_overlap([]) is None


def _workers(n: int, kinds_per_tick, seconds: float = 2.0, hz: int = 50) -> list[WorkerRecord]:
    """``n`` workers each in one long fetch; at tick k worker w's sample is ``kinds_per_tick(k, w)``."""
    calls = {"lock": ("futex", 0.0, LOCK_STACK), "wait": ("clock_nanosleep", 0.0, SLEEP_STACK)}
    calls["compute"] = ("running", 1.0, SLEEP_STACK)
    out = []
    for w in range(n):
        rec = WorkerRecord(worker_id=w, fetches=[(0.0, seconds, 0.01)])
        for k in range(int(seconds * hz)):
            call, cpu, stack = calls[kinds_per_tick(k, w)]
            rec.samples.append((k / hz, call, cpu, stack))
        out.append(rec)
    return out


def test_four_workers_queued_on_one_lock_are_serialised_and_the_place_is_the_users():
    # at every tick one worker holds the lock (sleeps in it: its storage read), the three others wait for it
    s = summarise_rank(_workers(4, lambda k, w: "wait" if k % 4 == w else "lock"), None)
    assert s["lock_share"] == pytest.approx(0.75) and s["wait_share"] == pytest.approx(0.25)
    assert s["overlap"] == pytest.approx(4.0) and s["progressing"] == pytest.approx(1.0)
    assert is_serialised(s, PARAMS)
    assert s["lock_place"] == USER  # not multiprocessing's frame, not ddpdoctor's
    assert s["lock_kind"] == "a multiprocessing lock shared by the workers"


def test_workers_whose_waits_overlap_are_not_serialised():
    s = summarise_rank(_workers(2, lambda k, w: "wait"), None)
    assert s["lock_share"] == 0 and s["overlap"] == pytest.approx(2.0) and s["progressing"] == pytest.approx(2.0)
    assert not is_serialised(s, PARAMS)
    assert "lock_place" not in s


def test_computing_workers_are_not_serialised():
    s = summarise_rank(_workers(2, lambda k, w: "compute"), None)
    assert s["compute_share"] == 1 and not is_serialised(s, PARAMS)


def test_one_worker_is_never_called_serialised():
    s = summarise_rank(_workers(1, lambda k, w: "lock"), None)
    assert s["lock_share"] == 1 and not is_serialised(s, PARAMS)


def test_samples_outside_the_window_are_left_out():
    workers = _workers(2, lambda k, w: "lock" if k < 50 else "wait")  # locked in the first second only
    s = summarise_rank(workers, (1.0, 2.0))
    assert s["lock_share"] == 0 and s["overlap"] == pytest.approx(2.0)
    assert summarise_rank(workers, (5.0, 6.0)) is None  # too few samples in the window: no shares


def _write(path: Path, lines: list) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"kind": "chunk", "samp', encoding="utf-8")


def test_the_reader_keeps_what_a_killed_worker_flushed(tmp_path):
    f = tmp_path / "worker0-1.jsonl"
    stack = [[USER.path, USER.line, USER.function, USER.code]]
    _write(
        f,
        [
            {"kind": "start", "schema": 1, "worker_id": 0, "pid": 1},
            {
                "kind": "chunk",
                "fetches": [[1.0, 2.0, 0.1]],
                "samples": [[1.5, "futex", 0.0, 0]],
                "stacks": {"0": stack},
            },
            {"kind": "chunk", "fetches": [], "samples": [[1.6, "futex", 0.0, 0], [1.7, "x", 0.0, 9]], "stacks": {}},
        ],
    )
    rec = read_worker_file(f)
    assert rec.fetches == [(1.0, 2.0, 0.1)]
    assert [s[0] for s in rec.samples] == [1.5, 1.6]  # the sample of an unknown stack is skipped
    assert rec.samples[0][3] == (USER,)


def test_the_probe_writes_what_the_reader_reads(tmp_path):
    """A real sampler thread on this thread while it 'fetches': holding a threading lock another thread waits
    on would need two workers; here one fetch sleeps (a wait) and one computes."""
    rank_dir = tmp_path / "rank0"
    inner_index = type("Q", (), {"get": lambda self, timeout=None: (0, [1, 2])})()
    sent = []
    inner_data = type("Q", (), {"put": lambda self, x: sent.append(x), "close": lambda self: None})()
    args = (None, None, inner_index, inner_data, None, True, None, False, 0, None, 0, 2, True, 0)
    new_args, _ = probe.WorkerProbe(str(rank_dir), env={}).worker_args(None, args, {})
    index_q, data_q = new_args[2], new_args[3]
    index_q.get(timeout=5)
    time.sleep(1.0)  # a blocking read
    data_q.put((0, "batch"))
    index_q.get(timeout=5)
    t_end = time.perf_counter() + 1.2  # (a thread computing in Python lets the sampler in at switch intervals)
    x = 0
    while time.perf_counter() < t_end:  # decoding
        x += 1
    data_q.put((1, "batch"))
    data_q.close()
    assert sent == [(0, "batch"), (1, "batch")]
    (file,) = (rank_dir / "loader_workers").glob("worker0-*.jsonl")
    rec = read_worker_file(file)
    assert len(rec.fetches) == 2
    (a0, a1, a_cpu), (b0, b1, b_cpu) = rec.fetches
    assert a1 - a0 >= 0.99 and b1 - b0 >= 1.19 and b_cpu > 10 * a_cpu  # (a busy host takes CPU from the loop)
    kinds = [classify(call, cpu, stack) for _t, call, cpu, stack in rec.samples]
    slept = [k for (t, *_), k in zip(rec.samples, kinds) if a0 < t < a1]
    computed = [k for (t, *_), k in zip(rec.samples, kinds) if b0 < t < b1]
    assert slept.count("wait") >= 0.8 * len(slept) > 10, slept
    assert computed.count("compute") >= 0.8 * len(computed) > 10, computed
    here = next(f for f in rec.samples[0][3] if f.function == "test_the_probe_writes_what_the_reader_reads")
    assert here.path == __file__ and here.code  # the stack reaches the caller, with its source line


def test_facts_name_the_serialised_rank_and_its_lock(tmp_path):
    dirs = {}
    for r in (0, 1):
        d = dirs[r] = tmp_path / f"rank{r}" / "loader_workers"
        d.mkdir(parents=True)
        kinds = (lambda k, w: "wait" if k % 4 == w else "lock") if r == 1 else (lambda k, w: "wait")
        for w in _workers(4, kinds):
            stacks, samples = {}, []
            for t, call, cpu, stack in w.samples:
                sid = stacks.setdefault(stack, len(stacks))
                samples.append([t, call, cpu, sid])
            table = {str(i): [[f.path, f.line, f.function, f.code] for f in st] for st, i in stacks.items()}
            chunk = {"kind": "chunk", "fetches": [list(f) for f in w.fetches], "samples": samples, "stacks": table}
            _write(d / f"worker{w.worker_id}-9.jsonl", [{"kind": "start", "worker_id": w.worker_id}, chunk])
    facts = loader_worker_facts({r: d.parent for r, d in dirs.items()}, {}, PARAMS)
    assert facts["loader.workers.rank"] == 1 and facts["loader.workers.serialised"] is True
    assert facts["loader.workers.lock_place"] == "train.py:66"
    assert facts["loader.workers.lock_code"] == "with self.lock:"
    assert facts["loader.workers.lock_share.per_rank"] == {0: 0.0, 1: 0.75}
    assert loader_worker_facts({0: tmp_path / "nothing"}, {}, PARAMS) == {}


def test_a_probe_that_cannot_write_leaves_the_worker_alone(tmp_path):
    rec = probe._Recorder(str(tmp_path / "missing-dir" / "w.jsonl"), {"schema": 1})
    rec.fetch_started()
    rec.fetch_ended()
    rec.flush()  # the folder does not exist: no exception, the probe stops writing
    assert rec.failed


def test_the_switch_turns_the_probe_off():
    args = tuple(range(14))
    assert probe.WorkerProbe("/nowhere", env={probe.SWITCH: "0"}).worker_args(None, args, {}) == (args, {})


def test_a_worker_stuck_in_its_fetch_is_named_at_its_users_frame():
    # worker 0 finished a fetch at t=1, then sat on a lock from t=1.1 to t=20; worker 1 finished everything
    stuck = WorkerRecord(worker_id=0, fetches=[(0.0, 1.0, 0.01)])
    stuck.samples = [(0.5, "running", 1.0, SLEEP_STACK)] + [
        (1.1 + k / 10, "futex", 0.0, LOCK_STACK) for k in range(190)
    ]
    done = WorkerRecord(worker_id=1, fetches=[(0.0, 1.0, 0.01), (1.0, 2.0, 0.01)])
    done.samples = [(1.5, "clock_nanosleep", 0.0, SLEEP_STACK)]
    u = unfinished_fetch(stuck)
    assert u["worker"] == 0 and u["seconds"] == pytest.approx(18.9) and u["kind"] == "lock" and u["place"] == USER
    assert unfinished_fetch(done) is None  # its last sample is inside a finished fetch
    facts = unfinished_facts({0: [done], 1: [stuck, done]})
    assert facts["loader.workers.unfinished.rank"] == 1 and facts["loader.workers.unfinished.workers"] == 1
    assert facts["loader.workers.unfinished.kind"] == "waiting on a lock"
    assert facts["loader.workers.unfinished.place"] == "train.py:66"
    assert facts["loader.workers.unfinished.code"] == "with self.lock:"
    assert unfinished_facts({0: [done]}) == {}


def test_the_probe_ends_after_its_records_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(probe, "MAX_RECORDS", 5)
    rec = probe._Recorder(str(tmp_path / "w.jsonl"), {"schema": 1, "worker_id": 0})
    rec.fetch_started()
    t = threading.Thread(target=probe._sample_loop, args=(rec, threading.get_ident(), threading.get_native_id()))
    t.start()
    t.join(timeout=5)
    assert not t.is_alive()  # it stopped on its own, nobody set done
    assert len(read_worker_file(tmp_path / "w.jsonl").samples) == 5


def test_a_worker_silent_in_an_open_fetch_while_its_rank_ran_on_held_the_gil():
    # the last chunk (written at t=10.0) showed a fetch open since t=9.5; the rank's window stopped at t=30
    w = WorkerRecord(worker_id=1, open_since=9.5, last_at=10.0, fetches=[(8.0, 9.4, 0.5)])
    w.samples = [(9.6, "running", 1.0, SLEEP_STACK), (9.7, "running", 1.0, SLEEP_STACK)]
    assert held_gil(w, 30.0)
    u = unfinished_fetch(w, 30.0)
    assert u["kind"] == "gil" and u["seconds"] == pytest.approx(20.5) and u["place"] == SLEEP_STACK[0]
    facts = unfinished_facts({1: [w]}, {1: 30.0})
    assert facts["loader.workers.unfinished.kind"].startswith("holding the GIL")
    assert not held_gil(w, 11.0)  # silent for 1 s only: a busy host can do that
    assert not held_gil(w, None)  # no window stop: nothing to measure the silence against
    ended = WorkerRecord(worker_id=1, open_since=9.5, last_at=10.0, fetches=[(9.5, 12.0, 2.4)])
    assert not held_gil(ended, 30.0)  # the fetch ended after all (its end came in a chunk the reader has)
    idle = WorkerRecord(worker_id=1, open_since=None, last_at=10.0)
    assert not held_gil(idle, 30.0)  # between fetches a worker writes nothing: silence says nothing
