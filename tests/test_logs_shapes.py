"""Message shapes the real-log corpus showed the engine missing (tests/real_logs): each built here in a few
lines, in the shape the thread posted, with the root cause, rank and fix the thread established; and the
near misses that must not be read the same way."""

from ddpdoctor.diagnosis import run_analyze
from ddpdoctor.logs import analyze_logs


def _write(tmp_path, text, name="job.log"):
    (tmp_path / name).write_text(text)
    return str(tmp_path)


def _top(path):
    return run_analyze([path]).diagnosis.findings[0]


def _fixes(finding):
    return "\n".join(f"{fx.title}\n{fx.change}" for fx in finding.fixes)


def test_gloo_loopback_fallback_is_the_interface_of_that_rank(tmp_path):
    p = _write(
        tmp_path,
        "[rank5] Warning: Unable to resolve hostname to a (local) address. Using the loopback\n"
        "        address as fallback. Manually set the network interface with GLOO_SOCKET_IFNAME\n"
        "RuntimeError: Gloo connectFullMesh failed ...\n",
    )
    f = analyze_logs([p]).facts
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "loopback"
    assert f["failure.network.backend"] == "gloo" and f["failure.network.ranks"] == [5]
    t = _top(p)
    assert t.rule == "NET005" and t.ranks == [5] and "loopback" in t.summary
    assert "GLOO_SOCKET_IFNAME" in t.fixes[0].title


def test_gloo_full_mesh_names_its_own_rank_on_a_wrapped_line(tmp_path):
    p = _write(
        tmp_path,
        "RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152]\n"
        "  timed out connecting: SO_ERROR: Connection refused, remote=[10.0.0.7]:40011\n"
        "  (rank=3, size=4, local=[10.0.0.9])\n",
    )
    f = analyze_logs([p]).facts
    assert f["failure.network.problem"] == "connect" and f["failure.network.remote"] == "10.0.0.7"
    assert f["failure.network.ranks"] == [3] and f["failure.network.remote_loopback"] is False
    t = _top(p)
    assert t.rule == "NET005" and t.ranks == [3] and "Connection refused to 10.0.0.7" in t.summary


def test_c10d_client_socket_forms_are_rendezvous_with_the_address(tmp_path):
    for line, addr, port in (
        (
            "[W socket.cpp:663] [c10d] The client socket has failed to connect to [::ffff:10.1.2.3]:29500 "
            "(errno: 110 - Connection timed out).",
            "10.1.2.3",
            29500,
        ),
        (
            "[E socket.cpp:860] [c10d] The client socket has timed out after 60s while trying to connect to "
            "192.0.0.1:1234",
            "192.0.0.1",
            1234,
        ),
    ):
        d = tmp_path / str(port)
        d.mkdir()
        p = _write(d, line + "\n")
        f = analyze_logs([p]).facts
        assert f["failure.root_cause.kind"] == "rendezvous", line
        assert (f["failure.rendezvous.addr"], f["failure.rendezvous.port"]) == (addr, port)
        t = _top(p)
        assert t.rule == "FL012" and f"{addr}:{port}" in t.summary and "MASTER_ADDR" in _fixes(t)


def test_old_one_line_nccl_system_error_is_a_network_fault_not_nothing(tmp_path):
    p = _write(tmp_path, "e= NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:272, unhanled system error\n")
    t = _top(p)
    assert t.rule == "NET005" and "unhandled system error" in t.summary and "--network=host" in _fixes(t)
    # the same words in prose without NCCL are not a finding of their own
    (tmp_path / "prose").mkdir()
    q = _write(tmp_path / "prose", "we saw an unhandled system error in the billing service\n")
    assert analyze_logs([q]).facts.get("failure.network.problem") is None


def test_a_vague_system_error_after_a_virtual_interface_is_the_interface(tmp_path):
    p = _write(
        tmp_path,
        "n1:10:10 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>\n"
        "n1:10:10 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>\n"
        "n1:10:20 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nNodes 2\n"
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.10.3\n",
    )
    f = analyze_logs([p]).facts
    assert f["failure.network.problem"] == "bad_interface" and "docker0" in f["failure.network.detail"]


def test_spawn_reports_the_killed_process_index_as_its_rank(tmp_path):
    p = _write(
        tmp_path, "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGKILL\n"
    )
    t = _top(p)
    assert t.rule == "FL008" and t.ranks == [2] and "memory" in _fixes(t)
    (tmp_path / "b").mkdir()
    q = _write(
        tmp_path / "b", "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 3\n"
    )
    f = analyze_logs([q]).facts
    assert f["failure.root_cause.kind"] == "exit" and f["failure.root_cause.rank"] == 1


def test_ddp_unused_parameter_message_without_its_prefix(tmp_path):
    p = _write(
        tmp_path,
        "Expected to have finished reduction in the prior iteration before starting a new one. "
        "This error indicates that your module has parameters that were not used in producing loss.\n",
    )
    t = _top(p)
    assert t.rule == "FL010" and t.fixes[0].knob == "ddp.find_unused_parameters"


def test_tee_prefix_glued_to_a_progress_bar_keeps_both_ranks(tmp_path):
    p = _write(
        tmp_path,
        "[default0]:Grouping texts in chunks of 2049:   8%|8         | 726/9672 [02:32<30:38, 4.8 examples/s]"
        "[default1]:[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600888 "
        "milliseconds before timing out.\n",
    )
    t = _top(p)
    assert t.rule in ("FL005", "FL014") and t.ranks == [0]


def test_an_unprefixed_progress_bar_is_the_one_rank_that_reported_no_timeout(tmp_path):
    wd = (
        "[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800328 milliseconds before timing out."
    )
    lines = "\n".join(wd.format(r=r) for r in (1, 2, 3))
    p = _write(
        tmp_path, "Running tokenizer on dataset:   9%|#         | 280000/2969526 [29:55<4:48:08]\n" + lines + "\n"
    )
    t = _top(p)
    assert t.rule == "FL005" and t.ranks == [0]
    # without output that carries no rank, an excerpt that shows ranks 1-3 says nothing about rank 0
    q = tmp_path / "b"
    q.mkdir()
    t = _top(_write(q, lines + "\n"))
    assert t.rule == "FL003" and 0 not in t.ranks


def test_older_per_rank_inconsistent_collective_reports_are_paired(tmp_path):
    # c10d before the two-rank form printed one "is running inconsistent collective" report per rank, and a
    # pasted copy may wrap a line between a key and its "=" (xljh0520/JOTR#4)
    fp = (
        "CollectiveFingerPrint(OpType=ALLGATHER, TensorShape\n=[{n}, 256], TensorDtypes=Float, TensorDeviceTypes="
        "TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false (\n"
        "default), pinned_memory=false (default), memory_format=(nullopt))\n"
    )
    p = _write(
        tmp_path,
        "".join(
            f"RuntimeError: Detected mismatch between collectives on ranks. Rank {r} is running "
            f"inconsistent collective: " + fp.format(n=n)
            for r, n in ((0, 41), (1, 40))
        ),
    )
    f = analyze_logs([p]).facts
    assert f["failure.mismatch.ranks"] == [0, 1] and f["failure.mismatch.aspects"] == ["shape"]
    assert (f["failure.mismatch.shape_a"], f["failure.mismatch.shape_b"]) == ("[41, 256]", "[40, 256]")
    t = _top(p)
    assert t.rule == "FL006" and "same shape" in _fixes(t)
    # one rank's report alone names no second rank and no differing aspect
    (tmp_path / "one").mkdir()
    q = _write(
        tmp_path / "one",
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running "
        "inconsistent collective: " + fp.format(n=41),
    )
    g = analyze_logs([q]).facts
    assert g["failure.mismatch.rank_b"] is None and g["failure.mismatch.aspects"] == []


def test_a_remote_error_with_no_exited_rank_asks_to_test_the_links(tmp_path):
    p = _write(
        tmp_path,
        "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:268, remote process exited or there "
        "was a network error, NCCL version 2.21.5\n"
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n",
    )
    t = _top(p)
    assert t.rule == "FL007" and "all_reduce_perf" in _fixes(t) and "ibstat" in _fixes(t)
    # when the peer's process is seen exiting, the cause is that process, not the links
    (tmp_path / "exited").mkdir()
    q = _write(
        tmp_path / "exited",
        "[rank1]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
        "prematurely.\n[rank0]: Segmentation fault (core dumped)\n",
    )
    assert "ibstat" not in _fixes(_top(q))


def test_nccl_bootstrap_error_trace_is_the_bootstrap_interface(tmp_path):
    p = _write(
        tmp_path,
        "n1:2330:2658 [2] NCCL INFO misc/socket.cc:567 -> 2\nn1:2330:2658 [2] NCCL INFO bootstrap.cc:270 -> 2\n",
    )
    f = analyze_logs([p]).facts
    assert f["failure.root_cause.kind"] == "network" and f["failure.network.problem"] == "bootstrap"
    t = _top(p)
    assert t.rule == "NET005" and "bootstrap.cc:270 -> 2, a system error" in t.summary
    assert "NCCL_SOCKET_IFNAME" in _fixes(t)
    # a successful return ("-> 0" is never printed) or another file's trace alone is not a bootstrap fault
    (tmp_path / "other").mkdir()
    q = _write(tmp_path / "other", "n1:2330:2658 [2] NCCL INFO init.cc:1350 -> 2\n")
    assert analyze_logs([q]).facts.get("failure.network.problem") != "bootstrap"


def test_root_cause_priority_is_data_in_metrics_toml():
    """#13 part 3: the order among failure kinds lives in rules/metrics.toml [failures]; the engine
    only says which evidence each kind has."""
    from ddpdoctor.logs.causal import ROOT_EVIDENCE, RootEvidence, root_cause
    from ddpdoctor.logs.model import LogEvent
    from ddpdoctor.resources import metric_defaults, metric_params

    assert set(metric_defaults()["failures"]["root_cause_priority"]) == set(ROOT_EVIDENCE)
    oom = LogEvent(rank=1, time=10.0, kind="oom", text="", file="r1.log", line_no=4)
    timeout = LogEvent(rank=0, time=12.0, kind="nccl_timeout", text="", file="r0.log", line_no=9)
    facts = {
        "failure.timeout.ranks": [0],
        "failure.timeout.dump_from_rank": None,
        "failure.seq_behind.rank": None,
        "failure.mismatch.behind_rank": None,
    }
    ev = RootEvidence(facts, oom=oom, first_timeout=timeout)
    assert root_cause(ev) == ("oom", 1, oom)
    order = metric_defaults()["failures"]["root_cause_priority"]
    timeout_first = metric_params({"failures.root_cause_priority": ["timeout"] + [k for k in order if k != "timeout"]})
    swapped = RootEvidence(facts, failure_params=timeout_first["failures"], oom=oom, first_timeout=timeout)
    assert root_cause(swapped) == ("timeout", 0, timeout)
    assert root_cause(ev) == ("oom", 1, oom)  # the other evidence keeps its own (the shipped) order
    assert root_cause(RootEvidence(facts)) == (None, None, None)
