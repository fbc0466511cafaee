"""Units of the hang dump (capture/agent/hang.py, logs/hang.py) and of the interface suggestion from host
records (logs/hostrec.py)."""

import json
import sys
import threading
import time
from pathlib import Path

from ddpdoctor.capture.agent import hang as agent_hang
from ddpdoctor.logs.hang import hang_dumps, hang_facts
from ddpdoctor.logs.hostrec import fill_network_suggestion, suggest_from_hosts
from ddpdoctor.logs.model import LogEvent


def test_describe_stack_tells_busy_from_collective():
    frames, state = agent_hang.describe_stack(sys._getframe())
    assert state == ("busy", None) and frames[-1][2] == "test_describe_stack_tells_busy_from_collective"


class _FakeAgent:
    def __init__(self, bundle):
        self.env, self.bundle, self.rank = {"DDPDOCTOR_HANG_S": "0.2"}, str(bundle), 0
        self.dir = str(Path(bundle) / "ranks" / "rank0")
        Path(self.dir).mkdir(parents=True)
        self.steps, self.last_step_time, self.finalized, self.events = 3, time.time(), False, []

    def event(self, kind, **kw):
        self.events.append((kind, kw))

    def internal_error(self, where, exc):
        raise exc


def evaluate_like(seconds):
    t = time.time() + seconds
    while time.time() < t:
        time.sleep(0.01)


def test_watch_records_a_busy_function_once_a_request_stands(tmp_path):
    agent = _FakeAgent(tmp_path)
    w = agent_hang.HangWatch(agent)
    (tmp_path / "ranks" / agent_hang.REQUEST_FILE).write_text('{"rank": 1}')
    done = threading.Event()
    th = threading.Thread(target=lambda: (evaluate_like(0.8), done.set()))
    th.start()
    while not done.is_set():  # sample the worker thread as the watcher samples main
        w._sample(sys._current_frames()[th.ident], time.time())
        time.sleep(0.1)
    th.join()
    w.flush()  # the agent's finalize() does this at exit
    rec = json.loads((tmp_path / "ranks" / "rank0" / "hang_dump.jsonl").read_text())
    st = rec["states"][0]
    assert st["state"] == "busy" and st["where"]["function"] == "evaluate_like"
    assert st["last_seen"] - st["since"] >= 0.5
    assert agent.events[0] == (
        "hang_dump",
        {
            "step": 3,
            "state": "busy",
            "op": None,
            "where": f"evaluate_like (test_hang_and_hosts.py:{st['where']['line']})",
        },
    )


def _dump(tmp_path, rank, states, resolved=False):
    d = tmp_path / "ranks" / f"rank{rank}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "hang_dump.jsonl").write_text(
        json.dumps({"schema": "ddpdoctor.hang/1", "rank": rank, "states": states, "resolved": resolved})
    )


def test_hang_facts_per_rank(tmp_path):
    _dump(
        tmp_path,
        0,
        [
            {
                "state": "busy",
                "op": None,
                "where": {"file": "/x/train.py", "line": 42, "function": "evaluate"},
                "since": 100.0,
                "first_seen": 101.0,
                "last_seen": 128.0,
            }
        ],
    )
    _dump(
        tmp_path,
        1,
        [
            {
                "state": "collective",
                "op": "all_reduce",
                "where": None,
                "since": 100.5,
                "first_seen": 101.0,
                "last_seen": 130.0,
            }
        ],
    )
    exit1 = LogEvent(1, 131.0, "exit", "exit code 1", "e", 1, {"exitcode": 1})
    f = hang_facts(hang_dumps([str(tmp_path)]), [exit1], 3)
    assert (f["failure.hang.busy_rank"], f["failure.hang.busy_where"], f["failure.hang.busy_seconds"]) == (
        0,
        "train.py:42",
        28.0,
    )
    assert f["failure.hang.waiting_ranks"] == [1] and f["failure.hang.waiting_op"] == "all_reduce"
    assert f["failure.hang.per_rank"] == [
        "rank 0 was busy in evaluate() at train.py:42 for 28.0 s",
        "rank 1 waited in all_reduce for 29.5 s, then exited with code 1",
        "rank 2 is gone (no stack dump and no exit recorded)",
    ]


def test_resolved_waits_are_ignored(tmp_path):
    _dump(tmp_path, 0, [{"state": "busy", "since": 1, "last_seen": 9, "where": None}], resolved=True)
    assert hang_dumps([str(tmp_path)]) == {}


def _host(name, *itfs, master=None):
    return {
        "schema": "ddpdoctor.host/1",
        "hostname": name,
        "env": {"MASTER_ADDR": master} if master else {},
        "interfaces": [{"name": n, "up": True, "addresses": a} for n, a in itfs],
    }


def test_suggestion_is_on_every_host_and_routes_to_master():
    recs = {
        "a": _host(
            "a",
            ("lo", ["127.0.0.1/8"]),
            ("docker0", ["172.17.0.1/16"]),
            ("eth0", ["10.0.0.1/24"]),
            ("ens5", ["192.168.1.10/24"]),
            master="192.168.1.10",
        ),
        "b": _host("b", ("lo", ["127.0.0.1/8"]), ("eth0", ["10.0.1.1/24"]), ("ens5", ["192.168.1.11/24"])),
    }
    name, per_host = suggest_from_hosts(recs)
    assert name == "ens5" and per_host == {"a": ["ens5", "eth0"], "b": ["ens5", "eth0"]}


def test_the_failing_name_is_never_suggested():
    facts = {"failure.network.ifname": "eth0", "nccl.suggested_ifname": None}
    fill_network_suggestion(facts, {"a": _host("a", ("eth0", ["10.0.0.1/24"]))})
    assert facts["failure.network.suggested_ifname"] is None
