"""Messages combined with the run's facts (issue 26 item 2) and the parser's reading of C++ aborts and wrapped
watchdog reports: small logs built here, the engine's top finding checked."""

from pathlib import Path

from ddpdoctor.logs import analyze_logs
from ddpdoctor.rules_engine import build_ruleset, diagnose
from ddpdoctor.rules_engine.facts import merge_facts


def _top(tmp_path: Path, text: str, known: dict | None = None, name: str = "out.log"):
    (tmp_path / name).write_text(text)
    known = known or {}
    la = analyze_logs([str(tmp_path)], known_facts=known)
    facts = merge_facts(known, la.facts)
    return la.facts, diagnose(facts, build_ruleset(), log_search=la.search).findings[0]


WORKER_EXITED = "RuntimeError: DataLoader worker (pid(s) 25) exited unexpectedly\n"


def test_worker_exited_with_a_small_dev_shm_names_its_size(tmp_path):
    facts, top = _top(
        tmp_path,
        WORKER_EXITED,
        {"host.shm_bytes": 64 << 20, "config.dataloader.num_workers": 4, "host.local_world_size": 2},
    )
    assert facts["failure.message.id"] == "dataloader.worker_exited"
    assert top.rule == "FL010"
    assert "67.1 MB" in top.fixes[0].change and "--shm-size=8g" in top.fixes[0].change


def test_worker_exited_without_host_facts_leads_with_the_dev_shm_check(tmp_path):
    facts, top = _top(tmp_path, WORKER_EXITED)
    assert facts["failure.message.id"] == "dataloader.worker_exited"
    assert "df -h /dev/shm" in top.fixes[0].change


def test_worker_exited_beside_a_large_dev_shm_stays_a_symptom(tmp_path):
    facts, top = _top(tmp_path, WORKER_EXITED, {"host.shm_bytes": 64 << 30})
    assert facts["failure.message.id"] is None
    assert "dataloader.worker_exited" in facts["failure.message.ids"]
    assert all("/dev/shm" not in f.change for f in top.fixes)


def test_unhandled_system_error_alone_gets_the_shm_and_socket_fix(tmp_path):
    facts, top = _top(tmp_path, "RuntimeError: NCCL Error 2: unhandled system error\n")
    assert facts["failure.message.id"] == "nccl.error.unhandled_system"
    assert "/dev/shm" in top.fixes[0].change and "NCCL_SOCKET_IFNAME" in top.fixes[0].change


def test_unhandled_system_error_beside_a_small_dev_shm_names_it(tmp_path):
    _facts, top = _top(tmp_path, "RuntimeError: NCCL Error 2: unhandled system error\n", {"host.shm_bytes": 64 << 20})
    assert "/dev/shm on this host is 67.1 MB" in top.fixes[0].change


def test_the_warn_line_naming_the_call_beats_the_system_error_code(tmp_path):
    facts, _top_finding = _top(
        tmp_path,
        "node1:1:2 [1] include/shm.h:27 NCCL WARN Call to shm_open failed : "
        "Permission denied\n[rank1]: RuntimeError: NCCL error in: "
        "ProcessGroupNCCL.cpp:957, unhandled system error, NCCL version 2.10.3\n",
    )
    assert facts["failure.message.id"] == "nccl.shm.no_permission"


def test_an_interface_fault_keeps_its_own_fix_over_the_system_error(tmp_path):
    facts, top = _top(
        tmp_path,
        "node1:100:100 [0] NCCL INFO NET/Socket : Using [0]bond0:192.168.1.161<0> "
        "[1]br-05ab815fa14e:172.19.0.1<0>\nRuntimeError: NCCL error in: "
        "ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.10.3\n",
    )
    assert facts["failure.network.problem"] != "system"
    assert facts["failure.message.id"] is None
    assert "bond0" in top.fixes[0].title + top.fixes[0].change


def test_an_uncaught_cxx_exception_is_its_what_message_not_a_crash(tmp_path):
    facts, top = _top(
        tmp_path,
        "terminate called after throwing an instance of 'gloo::IoException'\n"
        "  what():  [/opt/gloo/transport/tcp/pair.cc:724] connect [127.0.1.1]:3210: "
        "Connection refused\nAborted (core dumped)\n",
    )
    assert facts["failure.crash.ranks"] == [] and facts["failure.root_cause.kind"] == "network"
    assert top.rule == "NET005" and "GLOO_SOCKET_IFNAME" in top.fixes[0].change


def test_terminate_without_what_is_still_a_crash(tmp_path):
    facts, top = _top(tmp_path, "terminate called after throwing an instance of 'std::bad_alloc'\nstep 3 loss 1.0\n")
    assert facts["failure.root_cause.kind"] == "crash"


def test_a_wrapped_watchdog_report_is_a_timeout_and_collective_1_asks_for_the_device(tmp_path):
    facts, top = _top(
        tmp_path,
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)\n"
        "  ran for 721595 milliseconds before timing out.\n",
    )
    assert facts["failure.root_cause.kind"] == "timeout" and facts["failure.timeout.seq"] == 1
    assert top.rule == "FL003" and top.summary.startswith("A rank timed out")
    assert "set_device" in top.fixes[0].change and "barrier()" in top.fixes[0].change


def test_a_later_collective_does_not_ask_for_the_device(tmp_path):
    _facts, top = _top(
        tmp_path,
        "[rank0]: [E ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=10, NumelOut=10, "
        "Timeout(ms)=600000) ran for 600004 milliseconds before timing out.\n",
    )
    assert top.rule == "FL003" and all("set_device" not in f.change for f in top.fixes)


# ------------------------------------------------------------------ a rule's [log] names catalogue entries by id


def test_fl011_searches_the_catalogue_entries_it_names():
    from ddpdoctor.logs.catalogue import message_patterns
    from ddpdoctor.rules_engine.registry import build_ruleset

    rule = build_ruleset(use_config=False).rules["FL011"]
    assert set(message_patterns("cuda.device_side_assert")) <= set(rule.log_patterns)
    assert set(message_patterns("nccl.cuda.illegal_memory_access")) <= set(rule.log_patterns)


def test_a_rule_naming_an_unknown_message_is_refused(tmp_path):
    import pytest

    from ddpdoctor.rules_engine.model import RuleError, load_rule_file

    src = (Path(__file__).resolve().parent.parent / "rules" / "failure" / "FL011-cuda-error-pattern.toml").read_text()
    bad = tmp_path / "FL011-copy.toml"
    bad.write_text(src.replace('"cuda.misaligned_address"', '"cuda.no_such_message"'))
    with pytest.raises(RuleError) as exc:
        load_rule_file(bad)
    assert "cuda.no_such_message" in str(exc.value) and "rules/messages" in str(exc.value)
