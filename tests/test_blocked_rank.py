"""Busy or blocked (logs/blocked.py, logs/hang.py): a rank outside every collective that waits on a lock, an
event or a queue of its own is blocked (FL005 names the frame), not busy (FL014)."""

import json
import linecache
import sys
import threading
import time

from ddpdoctor.capture.agent import hang as agent_hang
from ddpdoctor.logs.blocked import blocked_in
from ddpdoctor.logs.hang import apply_blocked_root, apply_busy_root, hang_dumps, hang_facts
from ddpdoctor.logs.model import LogEvent


class _Log:
    """The log-rotation deadlock: rotate() runs with the lock held and writes through write() again."""

    def __init__(self, lock):
        self.lock, self.n = lock, 0

    def write(self, line):
        with self.lock:
            self.n += 1
            if self.n == 2:
                self.rotate()

    def rotate(self):
        self.write("rotated")


def _state_of(thread: threading.Thread, seconds: float = 15.0) -> dict:
    """A hang-dump state for a live thread, as the agent records it (stack with the innermost line's code)."""
    frames, _what = agent_hang.describe_stack(sys._current_frames()[thread.ident])
    stack = [{"file": f, "line": ln, "function": fn} for f, ln, fn, _k in frames]
    stack[-1]["code"] = linecache.getline(stack[-1]["file"], stack[-1]["line"]).strip()
    inner = stack[-1]
    return {
        "state": "busy",
        "op": None,
        "where": dict(inner),
        "first_seen": 100.0,
        "last_seen": 100.0 + seconds,
        "since": 100.0,
        "stack": stack,
    }


def _run(target) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    time.sleep(0.3)
    return t


def test_a_thread_that_re_enters_its_own_lock_is_blocked_and_the_holder_named():
    log = _Log(threading.Lock())
    t = _run(lambda: (log.write("a"), log.write("b")))
    w = blocked_in(_state_of(t))
    assert w is not None and w["kind"] == "lock" and w["function"] == "write"
    assert w["code"] == "with self.lock:" and w["holder"] is not None
    inner_line = int(w["where"].rsplit(":", 1)[1])
    holder_line = int(w["holder"].rsplit(":", 1)[1])
    assert holder_line > inner_line  # the outer write() is inside the with block the inner one waits at


def test_an_rlock_does_not_deadlock_and_a_computing_thread_is_busy():
    log = _Log(threading.RLock())
    log.write("a"), log.write("b")  # re-enters fine
    stop = time.time() + 1.0

    def spin():
        x = 0
        while time.time() < stop:
            x += sum(i * i for i in range(200))

    t = _run(spin)
    assert blocked_in(_state_of(t)) is None
    t.join()


def test_an_event_wait_is_blocked_without_a_holder_and_a_sleep_stays_busy():
    ev = threading.Event()

    def waiter():
        ev.wait()

    t = _run(waiter)
    w = blocked_in(_state_of(t))
    assert w is not None and w["kind"] == "wait" and w["holder"] is None and w["function"] == "waiter"
    ev.set()
    t = _run(lambda: time.sleep(0.6))  # one rank's own slow work (a download): FL014 keeps it
    assert blocked_in(_state_of(t)) is None


def test_cpu_time_over_half_the_wait_is_busy_whatever_the_stack():
    state = {
        "state": "busy",
        "where": {"file": "/x/t.py", "line": 5, "function": "f"},
        "first_seen": 0.0,
        "last_seen": 10.0,
        "cpu_s": 9.0,
        "stack": [{"file": "/x/t.py", "line": 5, "function": "f", "code": "with self.lock:"}],
    }
    assert blocked_in(state) is None
    assert blocked_in(dict(state, cpu_s=0.1))["kind"] == "lock"


def test_a_rank_that_moved_on_to_another_line_was_not_stuck():
    state = {
        "state": "busy",
        "where": {"file": "/x/t.py", "line": 9, "function": "f"},  # the later samples
        "first_seen": 0.0,
        "last_seen": 10.0,
        "stack": [{"file": "/x/t.py", "line": 5, "function": "f", "code": "item = q.get()"}],
    }
    assert blocked_in(state) is None
    state["where"]["line"] = 5
    assert blocked_in(state)["kind"] == "queue"


def _dump(root, rank, states):
    d = root / "ranks" / f"rank{rank}"
    d.mkdir(parents=True)
    doc = {"schema": "ddpdoctor.hang/1", "rank": rank, "resolved": False, "states": states}
    (d / "hang_dump.jsonl").write_text(json.dumps(doc))


def test_a_blocked_rank_is_the_stopped_rank_not_the_busy_one(tmp_path):
    stack = [
        {"file": "/x/train.py", "line": 78, "function": "main"},
        {"file": "/x/train.py", "line": 48, "function": "write"},
        {"file": "/x/train.py", "line": 55, "function": "rotate"},
        {"file": "/x/train.py", "line": 44, "function": "write", "code": "with self.lock:"},
    ]
    where = {"file": "/x/train.py", "line": 44, "function": "write"}
    _dump(tmp_path, 1, [{"state": "busy", "where": where, "first_seen": 101.0, "last_seen": 116.5, "stack": stack}])
    coll = {"state": "collective", "op": "backward (DDP gradient all-reduce)", "first_seen": 101.0, "last_seen": 115.5}
    _dump(tmp_path, 0, [dict(coll, since=101.0)])
    exit0 = LogEvent(0, 116.0, "exit", "exit code 1", "e", 1, {"exitcode": 1})
    f = hang_facts(hang_dumps([str(tmp_path)]), [exit0], 2)
    assert f["failure.hang.busy_rank"] is None and f["failure.hang.blocked_rank"] == 1
    assert (f["failure.hang.blocked_where"], f["failure.hang.blocked_holder"]) == ("train.py:44", "train.py:48")
    assert f["failure.hang.blocked_code"] == "with self.lock:" and f["failure.hang.blocked_seconds"] == 15.5
    assert "rank 1 was blocked, not computing, in write() at train.py:44 (`with self.lock:`)" in " ".join(
        f["failure.hang.per_rank"]
    )
    f.update({"failure.root_cause.kind": "timeout", "failure.ranks": [0]})
    apply_busy_root(f)
    apply_blocked_root(f)
    assert f["failure.root_cause.kind"] == "stopped" and f["failure.stopped.rank"] == 1
    assert f["failure.stopped.waiting_ranks"] == [0] and f["failure.symptom_ranks"] == [0]
