"""Unit tests of the log analysis on small log texts built here (no torch, no real runs)."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import project_env

from ddpdoctor.logs import analyze_logs, find_log_files
from ddpdoctor.logs.flight import load_dump
from ddpdoctor.logs.prefix import split


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def facts_of(tmp_path, files: dict, known=None) -> dict:
    for name, text in files.items():
        write(tmp_path, name, text)
    a = analyze_logs([str(tmp_path)], known)
    assert a is not None
    return a.facts


# --------------------------------------------------------------------------- prefixes and discovery


@pytest.mark.parametrize(
    "line,rank,local,has_time,msg_start",
    [
        ("[rank3]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog", 3, None, True, "[Rank 3]"),
        ("[default1]:[rank1]: Traceback (most recent call last):", 1, 1, False, "Traceback"),
        ("[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] x", 0, None, True, "x"),
        ("2025-06-24 17:29:06  [rank0]:[E624 09:29:21.005 ProcessGroupNCCL.cpp:1834] y", 0, None, True, "y"),
        (
            "E1122 00:46:25.806000 10800 torch/distributed/elastic/multiprocessing/api.py:1002] failed",
            None,
            None,
            True,
            "failed",
        ),
        ("[2024-05-01 10:00:00,123] INFO step 5", None, None, True, "INFO step 5"),
        ("[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog", None, None, False, "[Rank 0]"),
    ],
)
def test_prefixes(line, rank, local, has_time, msg_start):
    ln = split(line, 2025)
    assert (ln.rank, ln.local, ln.time is not None) == (rank, local, has_time)
    assert ln.msg.startswith(msg_start)


def test_discovery_layouts(tmp_path):
    write(tmp_path, "run/abc_123/attempt_0/1/stderr.log", "x\n")
    write(tmp_path, "node0/rank3.txt", "x\n")
    write(tmp_path, "nccl_debug.0.log", "x\n")
    write(tmp_path, "bundle/rank2/events.jsonl", '{"kind": "step", "step": 1}\n')
    write(tmp_path, "trace.json", "{}")
    (tmp_path / "fr").mkdir()
    (tmp_path / "fr" / "nccl_trace_rank_4").write_bytes(pickle.dumps({"version": "2.4", "entries": []}))
    names = sorted(p.relative_to(tmp_path).as_posix() for p in find_log_files([str(tmp_path)]))
    assert names == [
        "bundle/rank2/events.jsonl",
        "fr/nccl_trace_rank_4",
        "nccl_debug.0.log",
        "node0/rank3.txt",
        "run/abc_123/attempt_0/1/stderr.log",
    ]


def test_no_logs_gives_none(tmp_path):
    write(tmp_path, "rank0.json", "{}")
    assert analyze_logs([str(tmp_path)]) is None


# --------------------------------------------------------------------------- failures

OOM_THEN_TIMEOUT = """\
[rank1]:[E305 12:00:01.000000000 x.cpp:1] something
[rank1]: Traceback (most recent call last):
[rank1]:   File "train.py", line 10, in <module>
[rank1]:     raise torch.OutOfMemoryError("CUDA out of memory")
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.36 GiB. GPU 1 has a total capacity of 47.50 GiB of which 1.52 GiB is free.
[rank0]:[E305 12:10:02.000000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.
[rank2]:[E305 12:10:02.500000000 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.
"""


def test_oom_is_root_cause_and_timeouts_are_symptoms(tmp_path):
    f = facts_of(tmp_path, {"job.log": OOM_THEN_TIMEOUT})
    assert f["failure.root_cause.kind"] == "oom"
    assert f["failure.root_cause.rank"] == 1
    assert f["failure.oom.tried"] == "8.36 GiB"
    assert f["failure.symptom_ranks"] == [0, 2]
    assert f["failure.timeout.ranks"] == [0, 2]
    assert f["failure.timeout.op"] == "ALLREDUCE" and f["failure.timeout.seq"] == 808
    assert f["failure.timeout.timeout_ms"] == 600000 and f["failure.timeout.numel"] == 9801523
    assert f["failure.root_cause.time"] < f["failure.timeout.first_time"]
    assert f["failure.root_cause.time_str"].endswith("12:00:01 UTC")
    json.dumps(f)  # every fact is JSON-able


def test_source_line_of_a_traceback_is_not_an_oom(tmp_path):
    f = facts_of(
        tmp_path,
        {
            "rank0.log": 'Traceback (most recent call last):\n  File "t.py", line 3\n'
            '    raise torch.OutOfMemoryError("x")\nValueError: bad\n'
        },
    )
    assert f["failure.oom.present"] is False
    assert f["failure.exception.type"] == "ValueError" and f["failure.root_cause.kind"] == "exception"


PROSE = (
    "# title mentioning ncclRemoteError\n"
    "I think sharding causes a CUDA out of memory issue much earlier.\n"
    "The `ncclRemoteError` (code 6) becomes a `ncclInternalError`.\n"
)


def test_ticket_prose_is_not_a_failure(tmp_path):
    f = facts_of(tmp_path, {"ticket.log": PROSE})  # named a log: read, but prose is no failure
    assert f["failure.present"] is False


def test_notes_beside_logs_are_not_read_as_logs(tmp_path):
    """By content: a .txt of prose (README, notes) in a folder is not a log; one with log lines is."""
    (tmp_path / "notes.txt").write_text(PROSE)
    (tmp_path / "README.txt").write_text("How to run: torchrun the script with two ranks and read the output.\n")
    assert analyze_logs([str(tmp_path)]) is None
    (tmp_path / "output.txt").write_text(
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    a = analyze_logs([str(tmp_path)])
    assert [Path(x).name for x in a.files] == ["output.txt"] and a.facts["failure.root_cause.kind"] == "oom"


def test_sequence_skew_names_the_rank_behind(tmp_path):
    lines = [
        f"[E ProcessGroupNCCL.cpp:458] [Rank {r}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800100 milliseconds before timing out."
        for r, s in ((0, 500), (1, 500), (2, 431), (3, 500))
    ]
    f = facts_of(tmp_path, {"all.log": "\n".join(lines)})
    assert (f["failure.seq_behind.rank"], f["failure.seq_behind.by"]) == (2, 69)
    assert f["failure.root_cause.kind"] == "seq_behind" and f["failure.root_cause.rank"] == 2
    assert f["failure.timeout.seq_by_rank"] == {"0": 500, "1": 500, "2": 431, "3": 500}


def test_work_state_and_dump_signal(tmp_path):
    text = (
        "[rank0]:[E624 09:29:06.969 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 0] Exception "
        "(either an error or timeout) detected by watchdog at work: 54, last enqueued NCCL work: 84, last "
        "completed NCCL work: 53.\n"
        "[rank1]:[E624 09:29:07.1 ProcessGroupNCCL.cpp:1600] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a "
        "dump signal due to a collective timeout from rank 0 and we will try our best to dump the debug info.\n"
    )
    f = facts_of(tmp_path, {"x.log": text})
    assert f["failure.timeout.last_enqueued"] == {"0": 84} and f["failure.timeout.enqueued_ahead"] == 30
    assert f["failure.timeout.dump_from_rank"] == 0


def test_mismatch_full_fingerprint(tmp_path):
    text = (
        "[rank0]: RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE, TensorShape=[10], TensorDtypes=Float, "
        "TensorDeviceTypes=TensorOptions(dtype=float, device=cpu)), but Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=5, OpType=ALLREDUCE, TensorShape=[20], TensorDtypes=Float, "
        "TensorDeviceTypes=TensorOptions(dtype=float, device=cpu)). Collectives differ in the following "
        "aspects: \t Tensor Tensor shapes: 10vs 20\n"
    )
    f = facts_of(tmp_path, {"x.log": text})
    assert f["failure.mismatch.shape_a"] == "[10]" and f["failure.mismatch.shape_b"] == "[20]"
    assert f["failure.mismatch.aspects"] == ["shape"]
    assert f["failure.root_cause.kind"] == "mismatch"


TORCHRUN_KILL = """\
[default0]:step 0 loss 1.0
[default1]:step 0 loss 1.0
[default0]:step 1 loss 1.0
[default0]:[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:18082: Connection reset by peer.
W1122 00:46:31.241000 10826 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 10831 closing signal SIGTERM
E1122 00:46:31.443000 10826 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 10832) of binary: /usr/bin/python
=======================================================
train.py FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_00:46:31
  host      : node7
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 10831)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 10831
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_00:46:31
  host      : node7
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 10832)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 10832
=======================================================
"""


def test_torchrun_summary_sigkill(tmp_path):
    f = facts_of(tmp_path, {"torchrun.out": TORCHRUN_KILL})
    assert f["failure.killed.rank"] == 1 and f["failure.killed.signal"] == "SIGKILL"
    assert f["failure.killed.exitcode"] == -9
    assert f["failure.root_cause.kind"] == "killed" and f["failure.root_cause.rank"] == 1
    assert f["failure.torchrun_named_rank"] == 1 and f["failure.torchrun_misleading"] is False
    assert f["failure.killed.terminated_ranks"] == [0]
    assert f["failure.remote_error.ranks"] == [0]
    assert f["failure.progress.last_step"] == {"0": 1, "1": 0}


def test_events_jsonl_stopped_rank(tmp_path):
    r0 = "\n".join(json.dumps({"time": 1000.0 + s, "kind": "step", "step": s, "rank": 0}) for s in range(10))
    r0 += "\n" + json.dumps(
        {
            "time": 1100.0,
            "kind": "exception",
            "rank": 0,
            "exc_type": "RuntimeError",
            "message": "[gloo] Timed out waiting 15000ms for recv operation to complete",
        }
    )
    r1 = "\n".join(json.dumps({"time": 1000.0 + s, "kind": "step", "step": s}) for s in range(7))
    r1 += "\n" + json.dumps({"time": 1008.0, "kind": "exit", "exitcode": 0, "steps_completed": 7})
    f = facts_of(tmp_path, {"rank0/events.jsonl": r0, "rank1/events.jsonl": r1})
    assert f["failure.stopped.rank"] == 1 and f["failure.stopped.last_step"] == 6  # steps 0..6 completed
    assert f["failure.root_cause.kind"] == "stopped"
    assert f["failure.timeout.ranks"] == [0]


def test_events_jsonl_oom(tmp_path):
    f = facts_of(
        tmp_path,
        {
            "rank2/events.jsonl": json.dumps(
                {"time": 5.0, "kind": "oom", "message": "CUDA out of memory. Tried to allocate 1.00 GiB", "step": 4}
            )
        },
    )
    assert f["failure.oom.first_rank"] == 2 and f["failure.root_cause.kind"] == "oom"


# --------------------------------------------------------------------------- NCCL INFO

NCCL_2NODE = """\
nodeA:100:100 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>
nodeA:100:100 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB docker0:172.17.0.1<0>
nodeA:100:100 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>
nodeA:100:100 [0] NCCL INFO Using network Socket
NCCL version 2.18.3+cuda12.2
nodeA:100:200 [0] NCCL INFO comm 0x55d0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0x1 - Init START
nodeA:101:201 [1] NCCL INFO comm 0x55d1 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 2000 commId 0x1 - Init START
nodeA:100:200 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct
nodeA:101:201 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0
nodeB:300:300 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>
nodeB:300:400 [0] NCCL INFO comm 0x66 rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0x1 - Init START
nodeB:300:400 [0] NCCL INFO Channel 00/0 : 2[0] -> 3[1] via P2P/IPC
nodeB:300:401 [0] transport/net_socket.cc:518 NCCL WARN NET/Socket : peer 10.0.0.1<4242> closed connection: remote process exited or there was a network error
"""


def test_nccl_info_facts(tmp_path):
    f = facts_of(
        tmp_path,
        {"nccl.log": NCCL_2NODE},
        known={"host.interfaces": {"nodeA": ["lo", "docker0", "eth0"], "nodeB": ["lo", "eth0", "ib0"]}},
    )
    assert f["nccl.version"] == "2.18.3+cuda12.2"
    assert f["nccl.transport"] == "Socket" and f["nccl.ib_present"] is True
    assert f["nccl.socket_with_ib"] is True and f["nccl.socket_without_ib"] is False
    assert f["nccl.ib_devices"] == ["mlx5_0:1", "mlx5_1:1"]
    assert f["nccl.bad_ifnames"] == ["docker0"] and f["nccl.ifnames_differ"] is True
    assert f["nccl.ifname_problem"] == "some_virtual"
    assert f["nccl.suggested_ifname"] == "eth0"
    assert (f["nccl.shm_paths"], f["nccl.p2p_paths"], f["nccl.net_paths"]) == (1, 1, 1)
    assert f["nccl.nranks"] == 4
    # the NCCL WARN of pid 300 on nodeB is attributed to global rank 2 through "comm … rank 2"
    assert f["failure.remote_error.ranks"] == [2] and f["failure.remote_error.peer"] == "10.0.0.1"


def test_ifname_suggestion_without_host_facts(tmp_path):
    text = "h1:1:1 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\nh1:1:1 [0] NCCL INFO Using network Socket\n"
    f = facts_of(tmp_path, {"nccl.log": text})
    assert f["nccl.only_bad_ifnames"] is True and f["nccl.ifname_problem"] == "only_virtual"
    assert f["nccl.suggested_ifname"] is None or not f["nccl.suggested_ifname"].startswith("lo")


def test_shm_instead_of_p2p(tmp_path):
    text = "\n".join(f"h:1:1 [0] NCCL INFO Channel {c:02d}/0 : 0[0] -> 1[1] via SHM/direct/direct" for c in range(4))
    text += "\nh:1:1 [0] NCCL INFO   GPU/0 NVL[48.0] - GPU/1\n"
    f = facts_of(tmp_path, {"nccl.log": text})
    assert f["nccl.shm_instead_of_p2p"] is True and f["nccl.nvlink_seen"] is True


def test_gloo_timeout_and_search(tmp_path):
    write(
        tmp_path,
        "rank0.log",
        "step 1\nRuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
        "waiting 15000ms for recv operation to complete\n",
    )
    write(tmp_path, "rank1.log", "step 1\nmy custom marker\n")
    a = analyze_logs([str(tmp_path)])
    assert a.facts["failure.timeout.backend"] == "gloo" and a.facts["failure.timeout.timeout_ms"] == 15000
    hit = a.search([r"custom marker"])
    assert hit == {
        "count": 1,
        "ranks": [1],
        "first_rank": 1,
        "first_time": None,
        "first_line": "my custom marker",
        "first_file": str(tmp_path / "rank1.log"),
    }
    assert a.search(["nothing like this"])["count"] == 0


# --------------------------------------------------------------------------- Flight Recorder


def _entry(seq, op="nccl:all_reduce", state="completed", size=(4,)):
    return {
        "record_id": seq,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": op,
        "time_created_ns": seq,
        "input_sizes": [list(size)],
        "input_dtypes": ["Float"],
        "output_sizes": [list(size)],
        "output_dtypes": ["Float"],
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": True,
        "timeout_ms": 600000,
        "is_p2p": False,
        "frames": [],
    }


def _dump(entries, ranks="[0, 1, 2]"):
    return {
        "version": "2.4",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
        "pg_status": {},
        "entries": entries,
    }


def test_flight_recorder_behind_missing_and_mismatch(tmp_path):
    d = tmp_path / "fr"
    d.mkdir()
    (d / "nccl_trace_rank_0").write_bytes(pickle.dumps(_dump([_entry(1), _entry(2), _entry(3, state="started")])))
    (d / "nccl_trace_rank_1").write_bytes(pickle.dumps(_dump([_entry(1), _entry(2, size=(8,), state="started")])))
    a = analyze_logs([str(d)])
    f = a.facts
    assert f["failure.flight_recorder.present"] is True
    assert f["failure.flight_recorder.ranks"] == [0, 1]
    assert f["failure.flight_recorder.missing_ranks"] == [2]
    assert f["failure.flight_recorder.behind_rank"] == 1 and f["failure.flight_recorder.behind_by"] == 1
    assert f["failure.flight_recorder.mismatch_seq"] == 2
    assert f["failure.flight_recorder.mismatch_aspects"] == ["shape"]
    assert f["failure.root_cause.kind"] == "flight_recorder"
    # analysis never imports torch (only capture does), so torch's own analyzer is the fix's command
    code = (
        "import sys; from ddpdoctor.diagnosis import run_analyze; r = run_analyze([sys.argv[1]]); "
        "assert r.diagnosis.findings[0].rule == 'FL009', r.diagnosis.findings[0].rule; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    res = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-800:]


def test_flight_recorder_refuses_code_in_pickles(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps({"version": "2.4", "entries": [Evil()]}))
    assert load_dump(p) is None


def test_every_fact_is_documented(tmp_path):
    doc = (Path(__file__).resolve().parents[1] / "docs" / "FACTS_LOGS.md").read_text()
    f = facts_of(tmp_path, {"job.log": OOM_THEN_TIMEOUT})
    undocumented = []
    for name in f:
        head, _, last = name.rpartition(".")
        if f"`{name}`" in doc:
            continue
        if (f"`{head}." in doc) and (f".{last}`" in doc or f"/{last}`" in doc or f"{last}/" in doc):
            continue
        undocumented.append(name)
    assert not undocumented


def test_watchdog_abort_is_not_a_root_cause(tmp_path):
    text = (
        "[rank0]:[E1 00:00:10.0 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=1000) ran for 1001 milliseconds "
        "before timing out.\n"
        "E0101 00:00:11.000000 1 torch/distributed/elastic/multiprocessing/api.py:1] failed (exitcode: -6) "
        "local_rank: 0 (pid: 12) of binary: python\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2025-01-01_00:00:11\n  host      : h\n"
        "  rank      : 0 (local_rank: 0)\n  exitcode  : -6 (pid: 12)\n  error_file: <N/A>\n"
        "  traceback : Signal 6 (SIGABRT) received by PID 12\n" + "=" * 40 + "\n"
    )
    f = facts_of(tmp_path, {"torchrun.log": text})
    assert f["failure.killed.present"] is False and f["failure.killed.terminated_ranks"] == [0]
    assert f["failure.root_cause.kind"] == "timeout" and f["failure.timeout.seq"] == 7


def test_exit_code_minus_9_line_is_a_kill(tmp_path):
    f = facts_of(
        tmp_path,
        {
            "torchrun.log": "E0101 00:00:11.000000 1 api.py:1] failed (exitcode: -9) local_rank: 3 "
            "(pid: 12) of binary: python\n"
        },
    )
    assert f["failure.killed.rank"] == 3 and f["failure.root_cause.kind"] == "killed"


def test_torchrun_error_file(tmp_path):
    err = {
        "message": {
            "message": "ValueError: label 12 out of range",
            "extraInfo": {"py_callstack": "Traceback (most recent call last): ...", "timestamp": "1700000000"},
        }
    }
    f = facts_of(
        tmp_path,
        {
            "logs/run_x/attempt_0/1/error.json": json.dumps(err),
            "logs/run_x/attempt_0/0/stderr.log": "RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:1234\n",
        },
    )
    assert f["failure.root_cause.kind"] == "exception" and f["failure.root_cause.rank"] == 1
    assert f["failure.exception.type"] == "ValueError" and f["failure.root_cause.time"] == 1700000000.0
    assert f["failure.symptom_ranks"] == [0]


def test_step_of_the_root_cause_by_time_and_by_line(tmp_path):
    timed = "\n".join(f"[2025-01-01 00:00:{s:02d}] step {s}" for s in range(5))
    timed += "\n[2025-01-01 00:00:02,500] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\n"
    f = facts_of(tmp_path / "a", {"rank3.log": timed})
    assert f["failure.root_cause.rank"] == 3 and f["failure.root_cause.step"] == 2
    f = facts_of(
        tmp_path / "b", {"rank2.log": "step 0\nstep 1\nRuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n"}
    )
    assert f["failure.root_cause.rank"] == 2 and f["failure.root_cause.step"] == 1


def test_ddpdoctor_run_events_layout(tmp_path):
    """events.jsonl as `ddpdoctor run` writes it (ranks/rankN/events.jsonl, kind + type fields)."""

    def ev(rank, t, kind, **kw):
        return json.dumps(dict({"time": 1000.0 + t, "rank": rank, "kind": kind}, **kw))

    r0 = [
        ev(0, 0, "start", pid=1),
        ev(0, 1, "step", step=0),
        ev(0, 2, "step", step=1),
        ev(0, 3, "step", step=2),
        ev(
            0,
            20,
            "exception",
            step=3,
            type="builtins.RuntimeError",
            message="[gloo] Connection closed by peer [127.0.0.1]:1",
            oom=False,
            uncaught=True,
        ),
        ev(0, 21, "exit", code=1, reason="exception", steps_completed=3),
    ]
    r1 = [
        ev(1, 0, "start", pid=2),
        ev(1, 1, "step", step=0),
        ev(1, 2, "step", step=1),
        ev(
            1,
            2.5,
            "oom",
            step=2,
            type="OutOfMemoryError",
            message="CUDA out of memory. Tried to allocate 2.00 GiB",
            caught=None,
        ),
        ev(1, 3, "step", step=3),
        ev(1, 4, "exit", code=0, reason="done", steps_completed=4),
    ]
    f = facts_of(tmp_path, {"ranks/rank0/events.jsonl": "\n".join(r0), "ranks/rank1/events.jsonl": "\n".join(r1)})
    assert f["failure.root_cause.kind"] == "oom" and f["failure.root_cause.rank"] == 1
    assert f["failure.root_cause.step"] == 1  # by time: the OOM came after step 1
    assert f["failure.exception.type"] is None  # rank 0's error is a peer symptom
    assert f["failure.remote_error.ranks"] == [0] and f["failure.symptom_ranks"] == [0]
    assert f["failure.progress.last_step"] == {"0": 2, "1": 3}


def test_json_data_in_a_txt_file_is_not_a_log(tmp_path):
    write(tmp_path, "result_check_file.txt", '{"steps": {"columns": [1, 2]}}\n{"x": 1}\n')
    assert analyze_logs([str(tmp_path)]) is None


def test_watchdog_aborts_of_ranks_without_logs_are_not_causes(tmp_path):
    entry = (
        "[{i}]:\n  time      : 2025-01-01_00:00:11\n  host      : h\n  rank      : {r} (local_rank: {r})\n"
        "  exitcode  : -6 (pid: 1{r})\n  error_file: <N/A>\n  traceback : Signal 6 (SIGABRT) received by PID 1{r}\n"
    )
    text = (
        "[rank0]:[E1 00:00:10.0 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=1000) ran for 1001 milliseconds "
        "before timing out.\n"
        + "=" * 40
        + "\ntrain.py FAILED\n"
        + "-" * 40
        + "\nFailures:\n"
        + entry.format(i=1, r=1)
        + entry.format(i=2, r=2)
        + "-" * 40
        + "\nRoot Cause (first observed failure):\n"
        + entry.format(i=0, r=0)
        + "=" * 40
        + "\n"
    )
    f = facts_of(tmp_path, {"torchrun.log": text})
    assert f["failure.killed.present"] is False and f["failure.stopped.rank"] is None
    assert f["failure.root_cause.kind"] == "timeout" and f["failure.torchrun_failed_ranks"] == [0, 1, 2]


def test_rendezvous_failures(tmp_path):
    f = facts_of(
        tmp_path / "a",
        {
            "rank0.log": "torch.distributed.DistStoreError: Timed out after 901 seconds waiting "
            "for clients. 1/2 clients joined.\n"
        },
    )
    assert f["failure.root_cause.kind"] == "rendezvous" and f["failure.root_cause.rank"] == 0
    assert (f["failure.rendezvous.joined"], f["failure.rendezvous.expected"]) == (1, 2)
    f = facts_of(
        tmp_path / "b",
        {
            "rank1.log": "torch.distributed.DistNetworkError: The client socket has timed out "
            "after 900000ms while trying to connect to (10.1.80.121, 29500).\n"
        },
    )
    assert f["failure.rendezvous.addr"] == "10.1.80.121" and f["failure.rendezvous.port"] == 29500


def test_rendezvous_port_in_use_detail_on_its_own_line(tmp_path):
    # libuv's TCPStore (torch >= 2.4) as some consoles print it: the reason comes lines after the error
    f = facts_of(
        tmp_path,
        {
            "torchrun.log": "RuntimeError: The server socket has failed to listen on any local "
            "network address.\nport: 29500\nuseIpv6: 0\ncode: -98\n"
            "name: EADDRINUSE\nmessage: address already in use\n"
        },
    )
    assert f["failure.root_cause.kind"] == "rendezvous"
    text = f["failure.rendezvous.text"]
    assert text.startswith("RuntimeError: The server socket") and "address already in use" in text


def test_nccl_cuda_oom_warn(tmp_path):
    f = facts_of(
        tmp_path,
        {
            "nccl.log": "h:7:9 [3] NCCL INFO comm 0x1 rank 3 nranks 4 cudaDev 3 - Init COMPLETE\n"
            "h:7:9 [3] enqueue.cc:100 NCCL WARN Cuda failure 'out of memory'\n"
        },
    )
    assert f["failure.oom.first_rank"] == 3 and f["failure.root_cause.kind"] == "oom"


def test_failure_timeline(tmp_path):
    write(tmp_path, "job.log", "[rank1]: step 0\n[rank1]: step 1\n" + OOM_THEN_TIMEOUT)
    a = analyze_logs([str(tmp_path)])
    tl = a.failure_timeline()
    kinds = [(x["rank"], x["kind"]) for x in tl]
    assert kinds.index((1, "oom")) < kinds.index((0, "nccl_timeout")) < kinds.index((2, "nccl_timeout"))
    assert [x for x in tl if x["kind"] == "progress"] == [x for x in tl if x["kind"] == "progress"][:1]
    assert json.dumps(a.to_dict())


def test_log_analysis_does_not_import_torch(tmp_path):
    import subprocess
    import sys

    write(tmp_path, "job.log", OOM_THEN_TIMEOUT + NCCL_2NODE)
    code = (
        "import sys; from ddpdoctor.logs import analyze_logs; a = analyze_logs([sys.argv[1]]); "
        "assert a.facts['failure.root_cause.kind'] == 'oom'; assert 'torch' not in sys.modules, 'torch imported'"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=project_env(),
    )
    assert res.returncode == 0, res.stderr


def test_a_killed_dataloader_worker_is_a_kill_not_a_python_error(tmp_path):
    # torch.utils.data's report: the rank's RuntimeError is the symptom of a worker SIGKILLed (host OOM)
    (tmp_path / "rank0.log").write_text(
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
        "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.\n"
    )
    a = analyze_logs([str(tmp_path)])
    kinds = [e.kind for e in a.events]
    assert "killed" in kinds and "exception" not in kinds
    k = next(e for e in a.events if e.kind == "killed")
    assert k.data["signal"] == "SIGKILL" and k.data["source"] == "dataloader_worker" and k.data["host_oom"]
    assert a.facts["failure.root_cause.kind"] == "killed"


@pytest.mark.parametrize("after,caught", [(True, True), (False, False)])
def test_an_oom_the_script_caught_and_went_on_from(tmp_path, after, caught):
    """failure.oom.caught: the OOM's rank logged a step after it (the script skipped that batch on one rank)."""
    import json as _json

    rows = [
        {"time": 100.0, "rank": 1, "kind": "step", "step": 3},
        {
            "time": 100.5,
            "rank": 1,
            "kind": "oom",
            "step": 4,
            "type": "OutOfMemoryError",
            "message": "CUDA out of memory. Tried to allocate 2.00 GiB.",
        },
    ]
    if after:
        rows.append({"time": 100.6, "rank": 1, "kind": "step", "step": 4})
    f = facts_of(tmp_path, {"ranks/rank1/events.jsonl": "\n".join(_json.dumps(r) for r in rows) + "\n"})
    assert f["failure.oom.first_rank"] == 1 and f["failure.oom.caught"] is caught
