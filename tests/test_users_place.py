"""The user's place, never ddpdoctor's (issue 39): the capture agent's frames (its patch around the DataLoader's
``__next__``, loaded from ``…/ddpdoctor_capture_agent/``) are never named as where a rank hung, and a rank whose
main thread waits in its DataLoader's ``__next__`` is waiting for its DataLoader, named at the user's line."""

import json

from ddpdoctor.frames import is_dataloader_next, is_tool_frame
from ddpdoctor.logs.blocked import blocked_in, loader_wait, user_frame
from ddpdoctor.logs.hang import apply_blocked_root, apply_busy_root, hang_dumps, hang_facts
from ddpdoctor.logs.model import LogEvent

AGENT = "/tmp/ddpdoctor-run-82vvr4k9/inject/ddpdoctor_capture_agent/patches.py"
DL = "/usr/lib/python3.11/site-packages/torch/utils/data/dataloader.py"
STDLIB = "/usr/lib/python3.11"

# the stack rank 1's hang dump recorded in loader_worker_stuck_rank1 (paths shortened)
LOADER_STACK = [
    {"file": "/job/train.py", "line": 107, "function": "<module>"},
    {"file": "/job/train.py", "line": 90, "function": "main", "code": "for x, y in loader:"},
    {"file": AGENT, "line": 125, "function": "wrapper"},
    {"file": DL, "line": 725, "function": "__next__"},
    {"file": DL, "line": 1505, "function": "_next_data"},
    {"file": DL, "line": 1291, "function": "_try_get_data"},
    {"file": f"{STDLIB}/multiprocessing/queues.py", "line": 113, "function": "get"},
    {"file": f"{STDLIB}/selectors.py", "line": 415, "function": "select"},
]


def test_tool_frames_and_the_loaders_next():
    assert is_tool_frame(AGENT) and is_tool_frame("/src/ddpdoctor/capture/agent/patches.py")
    assert not is_tool_frame("/job/train.py") and not is_tool_frame(None)
    assert is_dataloader_next(DL, "__next__") and not is_dataloader_next(DL, "_next_data")
    assert user_frame(LOADER_STACK)["line"] == 90


def test_a_rank_in_next_loader_waits_for_its_dataloader():
    at = loader_wait(LOADER_STACK)
    assert at is not None and at["line"] == 90
    state = {"state": "busy", "where": {"file": AGENT, "line": 125, "function": "wrapper"}, "stack": LOADER_STACK}
    state.update(first_seen=100.0, last_seen=115.0, cpu_s=0.001)
    w = blocked_in(state)
    assert w["kind"] == "dataloader" and w["where"] == "train.py:90" and w["function"] == "main"
    assert w["code"] == "for x, y in loader:"


def test_the_users_dataset_code_under_next_is_the_ranks_own_work():
    stack = LOADER_STACK[:6] + [
        {"file": DL.replace("dataloader.py", "_utils/fetch.py"), "line": 52, "function": "fetch"},
        {"file": "/job/data.py", "line": 31, "function": "__getitem__", "code": "x = decode(raw)"},
    ]
    assert loader_wait(stack) is None
    assert user_frame(stack)["function"] == "__getitem__"


def _dump(root, rank, states):
    d = root / "ranks" / f"rank{rank}"
    d.mkdir(parents=True)
    doc = {"schema": "ddpdoctor.hang/1", "rank": rank, "resolved": False, "states": states}
    (d / "hang_dump.jsonl").write_text(json.dumps(doc))


def test_the_hang_names_the_users_loop_not_the_agents_wrapper(tmp_path):
    where = {"file": AGENT, "line": 125, "function": "wrapper", "since": 93.6}
    busy = {"state": "busy", "where": where, "first_seen": 97.6, "last_seen": 112.7, "since": 93.6}
    _dump(tmp_path, 1, [dict(busy, cpu_s=0.001, stack=LOADER_STACK)])
    coll = {"state": "collective", "op": "backward (DDP gradient all-reduce)", "first_seen": 98.0, "last_seen": 112.5}
    _dump(tmp_path, 0, [dict(coll, since=98.0)])
    exit0 = LogEvent(0, 113.0, "exit", "exit code 1", "e", 1, {"exitcode": 1})
    f = hang_facts(hang_dumps([str(tmp_path)]), [exit0], 2)
    assert f["failure.hang.busy_rank"] is None and f["failure.hang.blocked_rank"] == 1
    assert f["failure.hang.blocked_kind"] == "dataloader" and f["failure.hang.blocked_where"] == "train.py:90"
    text = " ".join(f["failure.hang.per_rank"])
    assert "rank 1 waited for its DataLoader in main() at train.py:90 (`for x, y in loader:`)" in text
    assert "wrapper" not in text and "patches.py" not in text
    f.update({"failure.root_cause.kind": "timeout", "failure.ranks": [0]})
    apply_busy_root(f)
    apply_blocked_root(f)
    assert f["failure.root_cause.kind"] == "stopped" and f["failure.stopped.rank"] == 1


def test_a_busy_rank_under_the_agents_patch_is_named_at_its_own_code(tmp_path):
    # a rank computing in its dataset (num_workers=0) under the patched __next__: busy, at the dataset's line
    stack = LOADER_STACK[:5] + [{"file": "/job/data.py", "line": 31, "function": "__getitem__"}]
    where = {"file": AGENT, "line": 125, "function": "wrapper", "since": 93.6}
    _dump(
        tmp_path,
        1,
        [{"state": "busy", "where": where, "first_seen": 97.6, "last_seen": 112.7, "cpu_s": 14.0, "stack": stack}],
    )
    coll = {"state": "collective", "op": "all_reduce", "first_seen": 98.0, "last_seen": 112.5, "since": 98.0}
    _dump(tmp_path, 0, [coll])
    f = hang_facts(hang_dumps([str(tmp_path)]), [], 2)
    assert f["failure.hang.busy_rank"] == 1
    assert (f["failure.hang.busy_function"], f["failure.hang.busy_where"]) == ("__getitem__", "data.py:31")
