"""How log lines relate: a watchdog report wrapped before its work, an abort that is the watchdog's tear-down,
NCCL's XML topology/graph files set by environment. Small logs built here."""

from pathlib import Path

from ddpdoctor.logs import analyze_logs

_WRAPPED_TIMEOUT = (
    "[Rank 1] Watchdog caught collective operation timeout:\n"
    "  WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)\n"
    "  ran for 600090 milliseconds before timing out.\n"
)


def _facts(tmp_path: Path, text: str, name: str = "rank1.log") -> dict:
    (tmp_path / name).write_text(text)
    a = analyze_logs([str(tmp_path)])
    assert a is not None
    return a.facts


def test_watchdog_report_wrapped_before_its_work_is_one_timeout(tmp_path):
    f = _facts(tmp_path, _WRAPPED_TIMEOUT)
    assert f["failure.timeout.present"] is True
    assert f["failure.timeout.op"] == "ALLREDUCE" and f["failure.timeout.seq"] == 42
    assert f["failure.timeout.timeout_ms"] == 600000


def test_abort_after_the_ranks_own_timeout_is_its_teardown_not_a_crash(tmp_path):
    f = _facts(tmp_path, _WRAPPED_TIMEOUT + "srun: error: node7: task 1: Aborted (core dumped)\n")
    assert f["failure.root_cause.kind"] == "timeout"
    assert f["failure.crash.ranks"] == []
    assert 1 in f["failure.killed.terminated_ranks"]


def test_unattributed_abort_after_a_timeout_in_the_same_file_is_its_teardown(tmp_path):
    # a folder, not a file named rank1.log: the launcher's line carries no rank
    f = _facts(tmp_path, _WRAPPED_TIMEOUT + "srun: error: ... Aborted (core dumped)\n", "output.log")
    assert f["failure.root_cause.kind"] == "timeout" and f["failure.root_cause.rank"] == 1


def test_abort_before_any_timeout_is_still_a_crash(tmp_path):
    f = _facts(tmp_path, "srun: error: node7: task 1: Aborted (core dumped)\n" + _WRAPPED_TIMEOUT)
    assert f["failure.root_cause.kind"] == "crash"


def test_segfault_after_a_timeout_is_still_a_crash(tmp_path):
    f = _facts(tmp_path, _WRAPPED_TIMEOUT + "Segmentation fault (core dumped)\n")
    assert f["failure.root_cause.kind"] == "crash"


def test_abort_on_another_rank_than_the_timeout_is_a_crash(tmp_path):
    (tmp_path / "rank0.log").write_text("[rank0]: Fatal: Aborted (core dumped)\n")
    f = _facts(tmp_path, _WRAPPED_TIMEOUT.replace("[Rank 1]", "[rank1]:[Rank 1]"))
    assert f["failure.crash.ranks"] == [0]


def test_graph_file_set_by_environment_names_it_in_the_fix(tmp_path):
    log = (
        "h:1:2 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /opt/vm/topo.xml\n"
        "h:1:2 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /opt/vm/graph.xml\n"
        "h:1:2 [0] graph/search.cc:719 NCCL WARN XML Import Channel : dev 3 not found.\n"
        "h:1:2 [0] NCCL INFO graph/search.cc:749 -> 2\n"
    )
    f = _facts(tmp_path, log, "rank0.log")
    assert f["nccl.graph_file"] == "/opt/vm/graph.xml" and f["nccl.topo_file"] == "/opt/vm/topo.xml"
    assert f["failure.message.id"] == "nccl.topo_xml.graph_import"
    assert "/opt/vm/graph.xml" in f["failure.message.fix_title"]
    assert "unset NCCL_GRAPH_FILE" in f["failure.message.fix"]


def test_graph_import_without_the_env_line_still_names_the_variable(tmp_path):
    f = _facts(tmp_path, "h:1:2 [0] graph/search.cc:719 NCCL WARN XML Import Channel : dev 1 not found.\n", "rank0.log")
    assert f["nccl.graph_file"] is None
    assert "NCCL_GRAPH_FILE" in f["failure.message.fix_title"]


def test_qp_that_cannot_reach_rtr_names_cross_nic_and_the_gid_from_the_line(tmp_path):
    line = (
        "h:1:2 [5] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, "
        "on dev mlx5_5:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.1.2.3, "
        "remote GID ::ffff:10.1.3.4\n"
    )
    f = _facts(tmp_path, line, "rank5.log")
    assert f["failure.message.id"] == "nccl.ib.qp_not_ready_to_receive"
    assert "NCCL_CROSS_NIC=0" in f["failure.message.fix"]
    assert "mlx5_5:1 used GID index 3 (::ffff:10.1.2.3)" in f["failure.message.fix"]
    assert "::ffff:10.1.3.4" in f["failure.message.fix_title"]


def test_a_peer_count_of_zero_params_is_a_count_that_never_arrived_not_a_model_mismatch(tmp_path):
    f = _facts(
        tmp_path,
        "RuntimeError: DDP expects same model across all ranks, but Rank 2 has 363 params, "
        "while rank 0 has inconsistent 0 params.\n",
        "output.log",
    )
    assert f["failure.message.id"] == "ddp.param_count_not_received"
    assert f["failure.root_cause.kind"] != "mismatch"
    assert "NCCL_SOCKET_IFNAME" in f["failure.message.fix"]


def test_different_nonzero_param_counts_stay_a_model_mismatch(tmp_path):
    f = _facts(
        tmp_path,
        "RuntimeError: DDP expects same model across all ranks, but Rank 1 has 224 params, "
        "while rank 0 has inconsistent 222 params.\n",
        "output.log",
    )
    assert f["failure.message.id"] == "ddp.params_differ_across_ranks"
    assert f["failure.root_cause.kind"] == "mismatch"


def test_faulthandlers_abort_after_the_ranks_own_timeout_is_its_teardown(tmp_path):
    # ddpdoctor run turns on faulthandler: the watchdog's SIGABRT then prints "Fatal Python error: Aborted"
    # and every thread's stack; that is still the tear-down of the timed-out rank, not a crash of its own
    dump = (
        "Fatal Python error: Aborted\n\nThread 0x00007f0000000002 (most recent call first):\n"
        '  File "/home/u/train.py", line 41 in main\n  File "/home/u/train.py", line 70 in <module>\n'
    )
    f = _facts(tmp_path, _WRAPPED_TIMEOUT + dump)
    assert f["failure.root_cause.kind"] == "timeout", f["failure.root_cause.kind"]
    assert f["failure.crash.ranks"] == []


def test_faulthandlers_segfault_after_a_timeout_is_still_a_crash(tmp_path):
    f = _facts(tmp_path, _WRAPPED_TIMEOUT + "Fatal Python error: Segmentation fault\n")
    assert f["failure.root_cause.kind"] == "crash"
