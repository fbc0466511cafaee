"""The real-log corpus (tests/real_logs/*): log excerpts posted in public issue threads, each with the
cause the thread established. Each case runs through the same path as `ddpdoctor analyze <folder>` on a
logs-only folder, and the top finding must have the expected rule, name the expected rank and give the
expected fix. Cases the engine gets wrong are listed in KNOWN_MISSES and run as strict xfail, so a fix
that makes one pass shows up (and must remove it from the dict).

KNOWN_MISSES is empty: every case passes with the current engine (docs/LOG_ACCURACY.md, from
benchmarks/log_corpus.py). A case the engine gets wrong goes there with what the engine lacks."""

import importlib.util
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "log_corpus.py"
_spec = importlib.util.spec_from_file_location("log_corpus", _BENCH)
log_corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(log_corpus)

CASES = log_corpus.load_cases()

# case folder -> what the engine lacks (measured against the failures branch code, see docs/LOG_ACCURACY.md)
KNOWN_MISSES: dict[str, str] = {}

KINDS = {"oom", "timeout", "mismatch", "interface", "p2p", "ib", "rendezvous", "uneven_inputs", "oom_killer",
         "nan", "unused_parameters", "exception", "exit", "other",
         # added with round 8 (issue 26): /dev/shm, device binding, DDP 'marked ready twice'
         "shm", "device", "ready_twice"}


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
