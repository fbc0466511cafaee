"""The real-log corpus (tests/real_logs/*): log excerpts posted in public issue threads, each with the
cause the thread established. Each case runs through the same path as `ddpdoctor analyze <folder>` on a
logs-only folder, and the top finding must have the expected rule, name the expected rank and give the
expected fix.

Two kinds of known misses run as strict xfails, so a fix that makes one pass shows up (and must remove it):
- KNOWN_MISSES below (none today);
- cases whose case.toml says `expected_fail_first_sight = true`: new real logs the unchanged engine got wrong when
  their round was scored once, before any change for them (benchmarks/log_corpus.py --first-sight; the record is
  tests/real_logs/first_sight_<round>.json). Every other case, including the ones of the same round that were right
  at first sight, must pass. When the engine learns a case, its flag is deleted and the case becomes a must-pass;
  the first-sight record itself never changes."""

import importlib.util
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "log_corpus.py"
_spec = importlib.util.spec_from_file_location("log_corpus", _BENCH)
log_corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(log_corpus)

CASES = log_corpus.load_cases()
FIRST_SIGHT = {r["round"]: {c["case"]: c for c in r["cases"]} for r in log_corpus.load_first_sight()}

# case folder -> what the engine lacks (measured against the failures branch code, see docs/LOG_ACCURACY.md)
KNOWN_MISSES: dict[str, str] = {}

KINDS = {
    "oom",
    "timeout",
    "mismatch",
    "interface",
    "p2p",
    "ib",
    "rendezvous",
    "uneven_inputs",
    "oom_killer",
    "nan",
    "unused_parameters",
    "exception",
    "exit",
    "other",
    # added with round 8 (issue 26): /dev/shm, device binding, DDP 'marked ready twice'
    "shm",
    "device",
    "ready_twice",
    # added with blind round 9: an NCCL setting in the environment (NCCL_GRAPH_FILE, …) that breaks init
    "nccl_config",
    # added with issue 26 round 2 (families read in torch 2.13.0): launcher setup, the store, code errors
    "launch",
    "store",
    "code",
}


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


def test_first_sight_records_cover_their_rounds():
    """Every case of a round is in that round's first-sight record, and a case may carry the first-sight-miss
    flag only if it was recorded wrong at first sight (the flag cannot hide a regression of a case that was right)."""
    for name, _, case in CASES:
        flagged = case.get("expected_fail_first_sight", False)
        if "round" not in case:
            assert not flagged, f"{name}: a first-sight flag needs a round"
            continue
        assert case["round"] in FIRST_SIGHT, f"{name}: round {case['round']!r} has no first-sight record"
        recorded = FIRST_SIGHT[case["round"]].get(name)
        assert recorded is not None, f"{name}: not in the first-sight record of its round"
        if flagged:
            assert not recorded["right"], f"{name}: flagged as a first-sight miss but was right at first sight"


def test_first_sight_is_recorded_once():
    """Scoring a round again must not overwrite its record (first sight means before any change)."""
    for round_name in FIRST_SIGHT:
        before = log_corpus.first_sight_path(round_name).read_bytes()
        assert log_corpus.record_first_sight(round_name) == 2
        assert log_corpus.first_sight_path(round_name).read_bytes() == before


def test_short_cause_drops_the_attribution():
    assert log_corpus.short_cause("Rank 1 ran out of memory (maintainer X: 'yes').") == "Rank 1 ran out of memory"
    assert log_corpus.short_cause("No attribution here.") == "No attribution here"


# the fast tier keeps the first case of each kind; the whole corpus is `slow`
FAST_CASES = set({c["kind"]: n for n, _f, c in reversed(CASES)}.values())


def _marks(name: str, case: dict) -> list:
    if name not in FAST_CASES:
        return [pytest.mark.slow, *_known(name, case)]
    return _known(name, case)


def _known(name: str, case: dict) -> list:
    if name in KNOWN_MISSES:
        return [pytest.mark.xfail(reason=KNOWN_MISSES[name], strict=True)]
    if case.get("expected_fail_first_sight"):
        first = FIRST_SIGHT.get(case.get("round"), {}).get(name, {})
        why = "; ".join(first.get("problems", [])) or "wrong at first sight"
        return [pytest.mark.xfail(reason=f"known first-sight miss ({case.get('round')}): {why}", strict=True)]
    return []


@pytest.mark.parametrize("name,folder,case", [pytest.param(n, f, c, id=n, marks=_marks(n, c)) for n, f, c in CASES])
def test_top_finding_matches_thread(name, folder, case):
    finding = log_corpus.top_finding(folder)
    assert log_corpus.check(case, finding) == []
