"""One analysis, one context: the thresholds, the rule set and the secrets an analysis remembers are its own
(ddpdoctor/diagnosis.py), so analyses in parallel threads never see each other's."""

import threading
from pathlib import Path

import ddpdoctor

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "capture_gloo_2ranks_slow_rank"
STRICT = {"metrics.straggler.min_late_share": 0.99}  # no rank is late in 99 % of the steps


def _verdict_rule(overrides) -> str | None:
    doc = ddpdoctor.analyze([str(SAMPLE)], overrides=overrides, hta="off", jobs=1)
    return doc.to_dict()["verdict"].get("rule")


def _three_calls(start: threading.Barrier, answers: list, overrides) -> None:
    start.wait()  # both threads analyze at the same time
    for _ in range(3):
        answers.append(_verdict_rule(overrides))


def test_two_threads_with_different_overrides_each_get_their_own_answer():
    plain, strict = _verdict_rule({}), _verdict_rule(STRICT)
    assert plain != strict  # the override matters on this sample, else the test below could not fail
    for _ in range(4):
        got: dict[str, list] = {"plain": [], "strict": []}
        start = threading.Barrier(2)
        runs = (("plain", {}), ("strict", STRICT))
        threads = [threading.Thread(target=_three_calls, args=(start, got[n], o)) for n, o in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == {"plain": [plain] * 3, "strict": [strict] * 3}


def test_a_secret_one_analysis_remembers_is_not_hidden_in_another():
    from ddpdoctor.redact import REDACTED, SecretMemory, redact_text

    mine, theirs = SecretMemory(), SecretMemory()
    mine.collect({"HF_TOKEN": "plainvalue77"})
    assert redact_text("echo plainvalue77", mine) == f"echo {REDACTED}"
    assert redact_text("echo plainvalue77", theirs) == "echo plainvalue77"
    assert redact_text("echo plainvalue77") == "echo plainvalue77"  # no memory: nothing remembered
