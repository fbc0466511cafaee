"""The real-log corpus (tests/real_logs/*): log excerpts posted in public issue threads, each with the
cause the thread established. Each case runs through the same path as `ddpdoctor analyze <folder>` on a
logs-only folder, and the top finding must have the expected rule, name the expected rank and give the
expected fix. Cases the engine gets wrong are listed in KNOWN_MISSES and run as strict xfail, so a fix
that makes one pass shows up (and must remove it from the dict).

KNOWN_MISSES was measured against the log engine of the `failures` branch (see docs/LOG_ACCURACY.md);
the passing cases rely on that engine (NET005, FL006, FL012, FL014/FL005 and the newer parsers), so on a
tree without it they fail."""

import importlib.util
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "log_corpus.py"
_spec = importlib.util.spec_from_file_location("log_corpus", _BENCH)
log_corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(log_corpus)

CASES = log_corpus.load_cases()

# case folder -> what the engine lacks (measured against the failures branch code, see docs/LOG_ACCURACY.md)
KNOWN_MISSES: dict[str, str] = {
    "ib__nccl-tests-227-ibext-plugin":
        "NET005 fires, but the engine knows nothing of external IB plugins: no fix names NCCL_IBEXT_DISABLE",
    "interface__aws-do-eks-50-gloo-loopback-fallback":
        "Gloo's 'Unable to resolve hostname ... Using the loopback address as fallback' and connectFullMesh "
        "refused at 127.0.0.1 are read as a plain Python error (FL010), not a loopback interface; rank 8 not read",
    "interface__aws-do-eks-69-gloo-hostname-loopback":
        "'Gloo connectFullMesh failed ... remote=[127.0.0.1] (rank=8, local=[127.0.0.1])' is read as a Python "
        "error, not as Gloo bound to loopback; the rank inside '(rank=8, ...)' is not read",
    "interface__pytorch-23363-docker-network-isolation":
        "the old one-line 'NCCL error in: ProcessGroupNCCL.cpp:272, unhanled system error' gives no finding at all",
    "oom_killer__acumen-4-spawn-sigkill":
        "FL008 is right, but the rank in torch.multiprocessing's 'process 0 terminated with signal SIGKILL' is not read",
    "rendezvous__llamafactory-3715-wrong-master-addr":
        "c10d's '[W socket.cpp] The client socket has failed to connect to [...]:29500 (errno: 110 ...)' "
        "warning is not recognised: no finding",
    "timeout__llamafactory-2424-tokenization-over-30min":
        "the unprefixed 'Running tokenizer on dataset' progress of rank 0 is not tied to a rank: FL003 names the "
        "waiting ranks 1-3 instead of the busy rank 0",
    "timeout__nanotron-204-grouping-texts":
        "nanotron's '[defaultN]:' prefix is not read as the rank: FL005 names rank 2 (which timed out) instead of "
        "rank 0, whose 'Grouping texts' progress shows it busy",
    "unused_parameters__yolox-885-convnext-features":
        "the same message without a 'RuntimeError:' prefix gives no finding at all",
}

KINDS = {"oom", "timeout", "mismatch", "interface", "p2p", "ib", "rendezvous", "uneven_inputs", "oom_killer",
         "nan", "unused_parameters", "exception", "exit", "other"}


def test_corpus_is_complete():
    assert len(CASES) >= 20
    for name, folder, case in CASES:
        assert case["kind"] in KINDS, name
        assert name.startswith(case["kind"] + "__"), name
        for key in ("source", "repo", "thread", "title", "cause", "fix_established"):
            assert case.get(key), f"{name}: {key}"
        assert case.get("expected_rule") or case.get("expected_kind"), name
        assert any(f.suffix == ".log" for f in folder.iterdir()), name
    assert set(KNOWN_MISSES) <= {c[0] for c in CASES}


@pytest.mark.parametrize("name,folder,case", [
    pytest.param(n, f, c, id=n, marks=[pytest.mark.xfail(reason=KNOWN_MISSES[n], strict=True)]
                 if n in KNOWN_MISSES else []) for n, f, c in CASES])
def test_top_finding_matches_thread(name, folder, case):
    finding = log_corpus.top_finding(folder)
    assert log_corpus.check(case, finding) == []
