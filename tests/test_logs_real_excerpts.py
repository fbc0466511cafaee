"""The 12 real log excerpts from GitHub issues (shared/real_traces/logs_from_github_issues):
each yields the finding its header describes, through the facts and through the rules."""

from pathlib import Path

import pytest

from ddpdoctor.logs import analyze_logs
from ddpdoctor.rules_engine.registry import build_ruleset
from ddpdoctor.rules_engine.verdict import diagnose


def _timeouts(op, seq, ranks, timeout_ms):
    def check(f):
        assert f["failure.timeout.op"] == op
        assert f["failure.timeout.seq"] == seq
        assert set(ranks) <= set(f["failure.timeout.ranks"])
        assert f["failure.timeout.timeout_ms"] == timeout_ms

    return check


def _01(f):
    _timeouts("ALLREDUCE", 64088, [0, 7], 1800000)(f)
    assert f["failure.timeout.seq_by_rank"]["7"] == 64088 and f["failure.timeout.seq_by_rank"]["0"] >= 96117
    assert f["failure.seq_behind.rank"] == 7 and f["failure.seq_behind.by"] > 32000
    assert f["failure.root_cause.kind"] == "seq_behind" and f["failure.root_cause.rank"] == 7


def _02(f):
    _timeouts("ALLREDUCE", 1, [0], 10000)(f)
    assert f["failure.timeout.ranks"] == [0]
    assert f["failure.root_cause.kind"] == "timeout" and f["failure.root_cause.rank"] == 0  # the known bad rank


def _03(f):
    _timeouts("ALLREDUCE", 808, [0, 1, 2], 600000)(f)
    assert f["failure.timeout.numel"] == 9801523
    assert f["failure.timeout.last_enqueued"] == {"0": 811, "1": 811}
    assert f["failure.timeout.last_completed"] == {"0": 807, "1": 807}
    assert f["failure.seq_behind.rank"] is None  # all stuck on the same collective


def _04(f):
    _timeouts("ALLREDUCE", 54, [0], 600000)(f)
    assert f["failure.timeout.last_enqueued"] == {"0": 84} and f["failure.timeout.enqueued_ahead"] == 30


def _05(f):
    _timeouts("ALLREDUCE", 1580, [0, 2, 4], 600000)(f)
    assert f["failure.timeout.numel"] == 466119168 and f["failure.timeout.pg"] == 1
    assert f["failure.timeout.last_completed"]["3"] == 1579


def _06(f):
    assert f["nccl.version"] == "2.7.8+cuda10.2"
    assert f["nccl.transport"] == "Socket" and f["nccl.ib_present"] is False
    assert f["nccl.socket_without_ib"] is True and f["nccl.socket_ifnames"] == ["enp134s0f0"]
    assert f["failure.present"] is False


def _07(f):
    assert f["nccl.version"] == "2.4.2+cuda10.0"
    assert f["nccl.transport"] == "Socket" and f["nccl.ibverbs_missing"] is True
    assert f["nccl.socket_without_ib"] is True and f["nccl.net_via"] == ["NET/Socket/0"]
    assert f["nccl.gdr"] is False and f["nccl.nranks"] == 2


def _08(f):
    assert f["nccl.transport"] == "IB" and f["nccl.ib_present"] is True
    assert sorted(f["nccl.ib_devices"]) == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]
    assert f["nccl.nranks"] == 8 and f["nccl.socket_with_ib"] is False


def _09(f):
    assert f["failure.remote_error.present"] is True and f["failure.remote_error.nccl"] is True
    assert f["failure.remote_error.peer"] == "10.200.84.247"
    assert "Broken pipe" in f["failure.remote_error.text"]
    assert f["failure.root_cause.kind"] == "remote_error"


def _10(f):
    assert f["failure.mismatch.present"] is True
    assert (f["failure.mismatch.rank_a"], f["failure.mismatch.rank_b"]) == (1, 2)
    assert (f["failure.mismatch.op_a"], f["failure.mismatch.seq_a"], f["failure.mismatch.seq_b"]) == ("BARRIER", 1, 0)
    assert f["failure.root_cause.kind"] == "mismatch" and f["failure.root_cause.rank"] == 2
    assert f["failure.torchrun_failed_ranks"] == [1]


def _11(f):
    assert f["failure.oom.first_rank"] == 1 and f["failure.oom.tried"] == "8.36 GiB"
    assert f["failure.root_cause.kind"] == "oom" and f["failure.root_cause.rank"] == 1


def _12(f):
    assert f["failure.oom.present"] is True and f["failure.oom.gpus"] == [0, 1]
    assert f["failure.oom.tried"] == "8.06 GiB" and f["failure.root_cause.kind"] == "oom"


CASES = {  # file prefix -> (fact check, rule ids that must fire)
    "01": (_01, ["FL004"]),
    "02": (_02, ["FL003"]),
    "03": (_03, ["FL003"]),
    "04": (_04, ["FL003"]),
    "05": (_05, ["FL003"]),
    "06": (_06, ["NET003"]),
    "07": (_07, ["NET003"]),
    "08": (_08, []),
    "09": (_09, ["FL007"]),
    "10": (_10, ["FL006"]),
    "11": (_11, ["FL001"]),
    "12": (_12, ["FL001"]),
}


@pytest.fixture(scope="module")
def excerpts(real_traces) -> dict[str, Path]:
    folder = real_traces / "logs_from_github_issues"
    files = {p.name[:2]: p for p in sorted(folder.glob("*.txt"))}
    assert sorted(files) == sorted(CASES), "the 12 excerpts changed"
    return files


@pytest.fixture(scope="module")
def ruleset():
    return build_ruleset()


@pytest.mark.parametrize("key", sorted(CASES))
def test_excerpt(key, excerpts, ruleset):
    a = analyze_logs([str(excerpts[key])])
    assert a is not None and a.files == [str(excerpts[key])]
    check, rules = CASES[key]
    check(a.facts)
    diag = diagnose(a.facts, ruleset, log_search=a.search)
    assert not diag.errors, diag.errors
    fired = [f.rule for f in diag.findings]
    for rid in rules:
        assert rid in fired, (rid, fired)
    failure_rules = [r for r in fired if r.startswith("FL")]
    if a.facts["failure.present"]:
        assert failure_rules, fired
        assert diag.findings[0].category in ("failure", "network")  # failures come first
    else:
        assert not failure_rules, fired
