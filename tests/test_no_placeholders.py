"""No placeholder text ever reaches a user (issue 25 item 6): every rule's templates (all rules/**/*.toml),
rendered with their facts missing, never say "(unknown)", "None", "?", "x(s)" or "(not recorded)"; the sentence is
rewritten. The template engine has no stand-in of its own: a text that needs a value the run did not record is
not said (a summary part is left out, a fix is not offered; docs/DESIGN.md), so what is left must still read as
a sentence, and a firing rule must still have a summary of its own.

Three ways a fact can be missing are tried: not recorded at all (every name Missing), recorded as None (the
log engine's value for a rank, file or line it could not find), and each stored test case of a rule with one
of the names its texts read removed, set to None or set to the value another case gives it, through the real
engine (only a rule that still fires shows text to anyone). And analyze's findings on the sample traces and
the log corpora hold none either."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddpdoctor.expr import ExprError, Missing
from ddpdoctor.rules_engine.engine import evaluate
from ddpdoctor.rules_engine.registry import load_rules

# what once stood in place for a value the run did not record ("set bucket_cap_mb to (not recorded)"): the
# template engine had the first as its own, a rule the second as a default; neither is said any more
STAND_IN = re.compile(r"\((?:not recorded|not logged|not known|missing|n/a)\)")
PLACEHOLDER = re.compile(
    r"\(unknown\)|(?<!=)\bNone\b|(?:^|[\s(])\?(?=$|[\s.,;:)'])|[A-Za-z]\(s\)|\bnan\b|\bnull\b|"
    r"<N/A>|\bundefined\b|" + STAND_IN.pattern
)
# what leaving a part out can do to a summary: a clause that starts or ends in nothing, punctuation doubled or
# after a space, empty parentheses, a sentence that starts in lower case
BROKEN = re.compile(
    r"^\s*$|^\s*[a-z,;:.)]|\s[,;:.](?=\s|$)|[,;:]\s*[.,;:]|\(\s*\)|"
    r"\b(?:and|or|the|of|in|at|to|by|for|with|from|on|than|over|a|an)[.,;:]?$"
)
# the failure rules (rules/failure/, this issue's own) are held to more: a missing rank, line or code never reads
# "rank none", and a sentence whose value is missing never ends in "in ." or ": ."
STRICT = re.compile(PLACEHOLDER.pattern + r"|\b(?:rank|ranks|line|code) none\b|differ in \.|set up: \.|rank: \.")
RULES = load_rules().rules


def _texts(rule):
    yield "summary", rule.summary
    for i, fx in enumerate(rule.fixes):
        yield f"fix {i + 1} title", fx.title
        yield f"fix {i + 1} change", fx.change
        if fx.value is not None:
            yield f"fix {i + 1} value", fx.value


def _render(rule, lookup_value) -> list[tuple[str, str]]:
    out = []
    values: dict = {}

    def look(name):
        if name in values:
            return values[name]
        if name in rule.params:
            return rule.params[name].default
        return lookup_value(name)

    for name, e in rule.evidence.items():
        try:
            values[name] = e(look)
        except (ExprError, TypeError, ValueError, ZeroDivisionError):
            values[name] = Missing(frozenset({name}))
    for where, t in _texts(rule):
        try:
            text, _missing = t.render(look)
        except (ExprError, TypeError, ValueError, ZeroDivisionError, AttributeError):
            continue  # an expression that cannot run on None makes the rule error, not speak
        if text is not None:  # None: not said (the part is left out, the fix not offered)
            out.append((where, text))
    return out


def _bad(pairs, rx=PLACEHOLDER) -> list[str]:
    return [
        f"{where}: …{m.string[max(0, m.start() - 40) : m.end() + 40]}…"
        for where, text in pairs
        for m in [rx.search(text)]
        if m
    ]


def _broken(summary: str, whole, facts: dict) -> list[str]:
    """What BROKEN finds in a summary and not in the case's summary with all its facts (which may well start
    with ``torch.compile``), nor inside a text the case quotes from a log ("NET/IB : Got completion")."""
    before = {m.group(0) for m in BROKEN.finditer(whole.summary if whole is not None else "")}
    quoted = [v for v in facts.values() if isinstance(v, str)]
    return [
        f"…{summary[max(0, m.start() - 40) : m.end() + 40]}…"
        for m in BROKEN.finditer(summary)
        if m.group(0) not in before and not any(summary[max(0, m.start() - 4) : m.end() + 4] in q for q in quoted)
    ]


def _rx(rule):
    return STRICT if rule.category == "failure" or rule.id.startswith("NET") else PLACEHOLDER


def test_the_pattern_catches_what_it_must():
    for text in ("Rank (unknown) raised X", "line ?.", "rank None", "2 rank(s)", "Read rank (unknown)'s traceback"):
        assert PLACEHOLDER.search(text), text
    for text in ("while rank none runs", "they differ in .", "could not be set up: . No"):
        assert STRICT.search(text) and not PLACEHOLDER.search(text), text
    for text in ("set bucket_cap_mb to (not recorded)", "rank (not known) waits"):
        assert PLACEHOLDER.search(text), text
    for text in (
        "Is it the data? Check it.",
        "not recorded here",
        "one rank — the log does not say which",
        "ranks 0, 1",
    ):
        assert not PLACEHOLDER.search(text), text
    for text in ("", " it reaches the step late.", "Rank 1 waits ( ) here.", "Rank 1 waits , late.", "It goes to ."):
        assert BROKEN.search(text), text
    for text in ("Rank 1 is a straggler: it waits 5 ms (3 % of the step).", "12 ranks wait."):
        assert not BROKEN.search(text), text


def test_a_text_that_needs_a_missing_value_is_not_said():
    """The engine's own behaviour: no stand-in in place; a part that needs the value is left out, a fix whose
    title, change or value needs it is not offered, a summary of which nothing can be said is the rule's title."""
    rule = RULES["IM001"]
    case = next(c for c in rule.tests if c.name.startswith("same input shapes: a slower device"))
    facts = {k: v for k, v in case.all_facts().items() if k != "straggler.rank"}
    f = evaluate(rule, facts, case.params).finding
    assert f is not None and "straggler.rank" in f.not_recorded
    assert not any("Rank" in x.title and "not recorded" in x.title for x in f.fixes)
    texts = [f.summary] + [t for x in f.fixes for t in (x.title, x.change, x.value or "")]
    assert not any(PLACEHOLDER.search(t) for t in texts), texts


@pytest.mark.parametrize("rid", sorted(RULES))
def test_templates_with_every_fact_missing(rid):
    rule = RULES[rid]
    missing = _render(rule, lambda n: Missing(frozenset({n})))
    as_none = _render(rule, lambda n: None)
    assert not _bad(missing + as_none), _bad(missing + as_none)


def _fact_names(rule) -> set[str]:
    names = set()
    for _where, t in _texts(rule):
        names |= set(t.names)
    for e in rule.evidence.values():
        names |= set(e.names)
    return {n for n in names if "." in n and not n.startswith(("metrics.", "match."))}


def _variants(rule, case, name):
    """The case's facts with ``name`` removed, set to None, and set to each other value a case of the rule
    gives it (what tests/test_template_variants.py's golden file pinned for the failure rules, now checked
    for placeholders in every rule: the exact texts of the stored cases are in the rule's snapshot)."""
    base = case.all_facts()
    yield "removed", {k: v for k, v in base.items() if k != name}
    yield "none", {**base, name: None}
    seen = []
    for other in rule.tests:
        v = other.all_facts().get(name)
        if v is not None and v != base.get(name) and v not in seen:
            seen.append(v)
            yield f"= {v!r}", {**base, name: v}
    if isinstance(base.get(name), bool):
        yield f"= {not base[name]!r}", {**base, name: not base[name]}


@pytest.mark.parametrize("rid", sorted(RULES))
def test_stored_cases_with_each_fact_removed_none_or_changed(rid):
    rule = RULES[rid]
    problems = []
    for case in rule.tests:
        if case.expect != "fire" or case.log:
            continue
        for name in sorted(_fact_names(rule) & set(case.all_facts())):
            whole = evaluate(rule, case.all_facts(), case.params).finding
            for variant, facts in _variants(rule, case, name):
                out = evaluate(rule, facts, case.params)
                if out.status != "fire":
                    continue
                f = out.finding
                pairs = [("summary", f.summary)]
                pairs += [(f"fix {fx.title[:30]}", f"{fx.title}\n{fx.change}\n{fx.value or ''}") for fx in f.fixes]
                problems += [f"{case.name} / {name} {variant}: {b}" for b in _bad(pairs, _rx(rule))]
                if variant in ("removed", "none"):  # a part left out must not break the sentence it was in
                    problems += [
                        f"{case.name} / {name} {variant}: summary: {b}" for b in _broken(f.summary, whole, facts)
                    ]
                if f.summary == f"{f.title}.":
                    problems.append(f"{case.name} / {name} {variant}: no summary can be said: {f.summary}")
    assert not problems, "\n".join(problems[:20])


ROOT = Path(__file__).resolve().parent.parent


def _inputs() -> list[Path]:
    """The sample traces and the log corpora (what the removed golden file rendered, besides the real traces)."""
    found = [p for p in sorted((ROOT / "sample_traces").iterdir()) if p.is_dir()]
    for d in (ROOT / "tests" / "real_logs", ROOT / "tests" / "data" / "failure_formats"):
        found += [
            p
            for p in sorted(d.iterdir())
            if p.suffix == ".log" or (p.is_dir() and any(f.suffix == ".log" for f in p.iterdir()))
        ]
    return found


def _logged_text(path: Path) -> str:
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.suffix in (".log", ".txt", ".jsonl")]
    return "\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files)


def test_findings_on_sample_traces_and_logs_have_no_placeholders():
    """Every finding analyze gives on the sample traces and the log corpora: its summary and fix titles hold no
    placeholder, except inside words quoted from the logs as logged ("DataLoader worker (pid(s) 25) exited"), and
    its fixes' changes and values (code, where "is None" is fine) no stand-in for a value."""
    from ddpdoctor.analysis import AnalyzeOptions
    from ddpdoctor.diagnosis import AnalysisContext, run_analyze
    from ddpdoctor.rules_engine.registry import build_ruleset

    rs = build_ruleset(use_config=False)
    problems, findings = [], 0
    for path in _inputs():
        diagnosis = run_analyze([str(path)], AnalyzeOptions(), AnalysisContext.of(rs)).diagnosis
        logged = None
        for f in diagnosis.findings:
            findings += 1
            for x in f.fixes:
                problems += [f"{path.name} {f.rule}: {x.title}: …{m.group(0)}…" for m in STAND_IN.finditer(x.change)]
                problems += [
                    f"{path.name} {f.rule}: {x.title}: …{m.group(0)}…" for m in STAND_IN.finditer(x.value or "")
                ]
            for text in [f.summary] + [x.title for x in f.fixes]:
                for m in STRICT.finditer(text):
                    logged = _logged_text(path) if logged is None else logged
                    words = re.search(r"\S*" + re.escape(m.group(0).strip()) + r"\S*", text[max(0, m.start() - 1) :])
                    if words is None or words.group(0).strip(".,;:") not in logged:
                        problems.append(f"{path.name} {f.rule}: …{text[max(0, m.start() - 50) : m.end() + 30]}…")
    assert findings > 50, findings  # the check saw real findings
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- issue 41, item 6: what the card and report say


def _document(path: Path, *args) -> dict:
    import json
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(path), "--hta", "off", "--format", "json", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode in (0, 3), res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def slow_rank() -> dict:
    return _document(ROOT / "sample_traces" / "capture_gloo_2ranks_slow_rank")


def _card(d: dict) -> str:
    from ddpdoctor.report.card import render_card

    return " ".join(" ".join(render_card(d, 200)).split())


def test_next_gives_the_recorded_command_in_full(slow_rank):
    card = _card(slow_rank)
    cmd = slow_rank["facts"]["run.command"]
    assert f"ddpdoctor run --out after -- {cmd}" in card, card
    assert "-- …" not in card


def test_one_stragglers_lateness_is_said_once(slow_rank):
    """The lateness, the column difference and the sampler's time measure the same delay: said once."""
    card = re.sub(r"step time .*? each", "", _card(slow_rank))  # (the step time is another quantity)
    numbers = re.findall(r"\d+\.\d ms", card.split("Also found")[0])
    late = next(n for n in numbers if n in card.split("after the median")[0])
    assert [n for n in numbers if abs(float(n[:-3]) - float(late[:-3])) <= 0.2 * float(late[:-3])] == [late], card
    shares = re.findall(r"(\d+) % of (?:the|a|each) step", card)
    assert len(shares) == len(set(shares)) == 1, shares  # one share, said once


def test_the_speedup_is_said_once_on_the_card():
    d = _document(ROOT / "sample_traces" / "capture_gloo_2ranks_comm_heavy")
    card = _card(d)
    x = f"{d['verdict']['expected_speedup']:.2f}x"
    assert card.count(x) == 1, card


def test_measured_lines_are_words_a_user_knows(slow_rank):
    from ddpdoctor.report.view import evidence_items

    items = evidence_items(
        {
            "bcast_leads": False,
            "loop_n": 0,
            "hook": "fp16_compress_hook",
            "colls": 1,
            "grad_mb": 51.0,
            "wait_share": 0.09,
        }
    )
    assert items == ["collectives per step 1", "gradients 51 MB", "wait 9 %"], items
    import numpy as np

    assert evidence_items({"bandwidth_bound": np.bool_(True)}) == []  # a rule's own decision, not a measurement
    for f in slow_rank["findings"]:
        for item in evidence_items(f.get("evidence") or {}):
            assert not re.search(r"\b(?:True|False|None)\b|_hook\b", item), (f["rule"], item)


def test_a_log_event_without_a_rank_is_named_not_questioned(tmp_path):
    from ddpdoctor.report.view import event_rank

    assert event_rank({"rank": 3}) == "3"
    assert event_rank({"rank": None, "kind": "exception", "text": "…errors.ChildFailedError:"}) == "launcher"
    assert event_rank({"rank": None, "kind": "killed", "file": "run/launcher.log"}) == "launcher"
    assert event_rank({"rank": None, "kind": "killed", "text": "Caught signal 7"}) == "no rank named"
    d = _document(ROOT / "tests" / "real_logs" / "shm__pipedream-76-nccl-sigbus-docker", "--report", tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    assert "| ? |" not in md and "| launcher | exception |" in md
    assert d["verdict"]["failed"]


def test_a_logs_only_failure_card_does_not_speak_of_recorded_steps():
    d = _document(ROOT / "tests" / "real_logs" / "shm__pipedream-76-nccl-sigbus-docker")
    card = _card(d)
    assert d["analysis"] is None and "nothing material to fix in the recorded steps" not in card, card
    assert "rank ?" not in card


@pytest.mark.parametrize(
    "line,width,expect",
    [
        ("  [FL002] torchrun named rank 3 but the first failure of another rank came earlier", 60, "failure of…"),
        ("x" * 100, 20, "x" * 19 + "…"),
        ("short", 20, "short"),
    ],
)
def test_a_cut_line_ends_at_a_word(line, width, expect):
    from ddpdoctor.text import cut

    out = cut(line, width)
    assert len(out) <= width and out.endswith(expect), out
