"""The failure message families of issue #11 as NCCL, gloo and PyTorch print them (tests/data/failure_formats):
network/bootstrap faults, desync reports in their several shapes, monitoredBarrier, DDP's model check, P2P
channel lines with hex bus ids; each gives the right root cause and the top rule."""

from pathlib import Path

import pytest

from ddpdoctor.diagnosis import run_analyze
from ddpdoctor.logs import analyze_logs

DATA = Path(__file__).parent / "data" / "failure_formats"


def facts(name):
    return analyze_logs([str(DATA / name)]).facts


def top(name):
    return run_analyze([str(DATA / name)]).diagnosis.findings[0]


def test_nccl_socket_ifname_naming_a_missing_interface():
    f = facts("nccl_ifname_missing.log")
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "no_interface"
    assert f["failure.network.ifname"] == "eth2" and f["failure.network.configured"] == {"NCCL_SOCKET_IFNAME": "eth2"}
    assert f["failure.network.suggested_ifname"] == "eth0"  # the interface NCCL listed
    t = top("nccl_ifname_missing.log")
    assert t.rule == "NET005" and any(fx.knob == "env.NCCL_SOCKET_IFNAME" and fx.value == "eth0" for fx in t.fixes)


def test_old_nccl_bootstrap_connect_timeout():
    f = facts("nccl_connect_timeout_old.log")
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "connect"
    assert f["failure.network.detail"] == "Connection timed out"


def test_ib_completion_error_is_a_network_fault_not_a_dead_peer():
    f = facts("nccl_ib_completion_error.log")
    assert f["failure.root_cause.kind"] == "network" and f["failure.root_cause.rank"] == 3
    assert f["failure.network.problem"] == "ib" and f["failure.network.ib_error"] == 12
    t = top("nccl_ib_completion_error.log")
    assert t.rule == "NET005" and "not a dead process" in t.summary
    assert any(fx.knob == "env.NCCL_IB_DISABLE" for fx in t.fixes)


def test_desync_with_nested_tensor_options_names_ops_and_shapes():
    f = facts("desync_nested_fingerprint.log")
    assert f["failure.root_cause.kind"] == "mismatch"
    assert (f["failure.mismatch.op_a"], f["failure.mismatch.op_b"]) == ("BROADCAST", "ALLREDUCE")
    assert (f["failure.mismatch.shape_a"], f["failure.mismatch.shape_b"]) == ("[1]", "[20]")
    assert f["failure.mismatch.aspects"] == ["op", "shape"] and f["failure.mismatch.ranks"] == [0, 1]
    t = top("desync_nested_fingerprint.log")
    assert t.rule == "FL006" and "rank 1 runs BROADCAST" in t.summary and "rank 0 runs ALLREDUCE" in t.summary
    assert any("rank 0" in fx.change and "checkpoint" in fx.change for fx in t.fixes)


def test_desync_without_commas_and_sequence_skew():
    f = facts("desync_no_commas.log")
    assert (f["failure.mismatch.op_a"], f["failure.mismatch.op_b"]) == ("BARRIER", "GATHER")
    assert (f["failure.mismatch.seq_a"], f["failure.mismatch.seq_b"]) == (1649, 0)
    assert f["failure.mismatch.behind_rank"] == 1 and set(f["failure.mismatch.aspects"]) == {"op", "sequence"}


def test_monitored_barrier_names_the_ranks_that_never_arrived():
    f = facts("monitored_barrier.log")
    assert f["failure.root_cause.kind"] == "stopped" and f["failure.stopped.ranks"] == [1, 3]
    assert f["failure.stopped.waiting_ranks"] == [0]


def test_ddp_model_check_is_a_mismatch():
    f = facts("ddp_model_mismatch.log")
    assert f["failure.root_cause.kind"] == "mismatch" and f["failure.mismatch.aspects"] == ["model"]
    assert f["failure.mismatch.ranks"] == [0, 1]


def test_p2p_hang_with_hex_bus_ids():
    f = facts("p2p_hang_hex_busids.log")
    assert f["nccl.p2p_paths"] == 2 and f["nccl.p2p_via"] == ["P2P/IPC"]
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "p2p_suspected"
    t = top("p2p_hang_hex_busids.log")
    assert t.rule == "NET005" and any(fx.knob == "env.NCCL_P2P_DISABLE" and fx.value == "1" for fx in t.fixes)


@pytest.mark.parametrize(
    "line,via,kind",
    [
        ("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "P2P/CUMEM/read", "p2p"),
        ("h:1:2 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via direct shared memory", "direct shared memory", "shm"),
        ("h:1:2 [0] NCCL INFO Channel 01 : 3[69000] -> 4[a2000] via P2P/direct pointer/read", "P2P/direct", "p2p"),
        ("h:1:2 [0] NCCL INFO Channel 00/0 : 2[1d000] -> 3[1e000] via SHM/direct/direct", "SHM/direct/direct", "shm"),
        ("h:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 9[1] [send] via NET/IB/0/GDRDMA", "NET/IB/0/GDRDMA", "net"),
    ],
)
def test_transport_lines_old_and_new(line, via, kind):
    from ddpdoctor.logs.nccl import NcclCollector

    c = NcclCollector()
    c.feed_plain(line.split("NCCL INFO ", 1)[1])
    (path,) = c.finish().paths
    assert (path["via"], path["type"]) == (via, kind)


def test_the_same_error_on_every_rank_is_shared_not_one_rank(tmp_path):
    for r in (0, 1):
        (tmp_path / f"rank{r}.log").write_text(
            'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
            f"FileNotFoundError: [Errno 2] No such file or directory: '/data/shard_{r}.bin'\n"
        )
    f = analyze_logs([str(tmp_path)]).facts
    assert f["failure.root_cause.kind"] == "exception" and f["failure.exception.shared"] is True
    assert f["failure.root_cause.rank"] is None
    t = run_analyze([str(tmp_path)]).diagnosis.findings[0]
    assert t.rule == "FL010" and t.summary.startswith("Every rank (0, 1) raised the same FileNotFoundError")


def test_ib_completion_variants_across_versions_and_plugins():
    f = facts("nccl_ib_completion_variants.log")
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "ib"
    assert f["logs.event_counts"]["network"] == 3 and f["failure.network.ib_error"] == 12


def test_docker0_chosen_then_a_timeout_is_the_interface(tmp_path):
    (tmp_path / "job.log").write_text(
        "n1:10:10 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>\n"
        "n1:10:10 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>\n"
        "n1:10:20 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nNodes 2\n"
        "[rank0]:[E1122 10:00:10.000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 "
        "milliseconds before timing out.\n"
    )
    f = analyze_logs([str(tmp_path)]).facts
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "bad_interface"
    t = run_analyze([str(tmp_path)]).diagnosis.findings[0]
    assert t.rule == "NET005" and "docker0" in t.summary


def test_kernel_oom_killer_is_a_kill_not_a_usage_error():
    f = facts("slurm_oom_killer_rank3.log")
    assert f["failure.root_cause.kind"] == "killed" and f["failure.root_cause.rank"] == 3
    assert f["failure.killed.host_oom"] is True and f["failure.exit.usage"] is None
    assert "OOM killer" in top("slurm_oom_killer_rank3.log").summary


@pytest.mark.parametrize("name", ["desync_wrapped_lines.log", "desync_bare_op.log"])
def test_desync_wrapped_over_lines_or_naming_a_bare_op(name):
    f = facts(name)
    assert f["failure.root_cause.kind"] == "mismatch" and f["failure.mismatch.ranks"] == [0, 1]
    assert (f["failure.mismatch.op_a"], f["failure.mismatch.op_b"]) == ("ALLREDUCE", "REDUCE")
    assert "op" in f["failure.mismatch.aspects"]


def test_gloo_connecting_to_a_loopback_address():
    f = facts("gloo_connect_loopback_rank1.log")
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "connect"
    assert f["failure.network.backend"] == "gloo" and f["failure.network.remote_loopback"] is True
    assert "loopback address" in top("gloo_connect_loopback_rank1.log").summary


@pytest.mark.parametrize(
    "name,value", [("nccl_old_lo_chosen_connect_refused.log", "eth0"), ("nccl_ifname_lo_multinode.log", "^docker0,lo")]
)
def test_loopback_interface_then_connect_refused_is_the_interface(name, value):
    f = facts(name)
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "bad_interface"
    t = top(name)
    assert t.rule == "NET005" and any(fx.knob == "env.NCCL_SOCKET_IFNAME" and fx.value == value for fx in t.fixes)


def test_nccl_p2p_transport_warning_is_a_p2p_fault():
    f = facts("nccl_p2p_warn.log")
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "p2p"
    t = top("nccl_p2p_warn.log")
    assert t.rule == "NET005" and any(fx.knob == "env.NCCL_P2P_DISABLE" for fx in t.fixes)


def test_no_interface_in_the_masters_subnet():
    f = facts("nccl_subnet_bind_docker.log")
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "subnet"
    assert f["failure.network.remote"] == "192.168.0.91<27030>" and f["failure.network.suggested_ifname"] is None
    assert any("--network=host" in fx.change for fx in top("nccl_subnet_bind_docker.log").fixes)


def test_interface_list_over_several_lines_and_bridges():
    f = facts("nccl_bridges_multiline_using.log")
    assert f["nccl.chosen_ifnames"][:2] == ["bond0", "br-05ab815fa14e"]
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "bad_interface"
    t = top("nccl_bridges_multiline_using.log")
    assert any(fx.knob == "env.NCCL_SOCKET_IFNAME" and fx.value == "bond0" for fx in t.fixes)


def test_an_unattributed_error_in_a_pasted_log_still_counts(tmp_path):
    (tmp_path / "paste.log").write_text(
        'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\nValueError: bad config value\n'
    )
    f = analyze_logs([str(tmp_path)]).facts
    assert f["failure.root_cause.kind"] == "exception" and f["failure.exception.type"] == "ValueError"


def test_old_nccl_header_and_a_log_that_stops_after_p2p_setup():
    f = facts("nccl22_p2p_then_silence.log")
    assert f["nccl.present"] is True and f["nccl.p2p_via"] == ["P2P/direct"]
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "p2p_suspected"
    assert "no training step" in f["failure.network.detail"]


def test_a_log_with_steps_and_p2p_is_not_a_hang(tmp_path):
    (tmp_path / "ok.log").write_text(
        "h:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC\nstep 1 loss 0.5\nstep 2 loss 0.4\n"
    )
    f = analyze_logs([str(tmp_path)]).facts
    assert f["failure.present"] is False and f["failure.network.problem"] is None
