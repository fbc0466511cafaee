"""The default terminal view: one card that fits 80 columns and about 25 lines.

Verdict, why (the deciding finding's own words), the two or three numbers that carry it,
the one first fix, a ``Next:`` line with the exact command to run next, one line per other
finding.  Reads only the diagnosis document (``ddpdoctor.diagnosis/1``); ``-v`` adds the
full view (report/terminal.py)."""

from __future__ import annotations

import datetime as _dt
import statistics

from ..bundle.discover import compact_ranks
from ..text import WIDTH, block_items, command, cut, plural, shell, wrap
from .view import analysis, findings, verdict_summary

FAILURE_CATEGORIES = ("failure", "network", "memory")
MAX_WHY_LINES = 7
MAX_FIX_LINES = 10
MAX_OTHERS = 4


def no_gain(fix: dict) -> bool:
    """A fix the analysis stored as not worth a trial (``worth_a_trial`` false, decided by trial/predict.annotate
    with the analysis's thresholds): read from the document, no threshold here."""
    return fix.get("worth_a_trial") is False


def _num(label: str, value: str, width: int) -> list[str]:
    return wrap(value, width, f"  {label:<12}", " " * 14)


def step_summary(d: dict) -> str | None:
    """'49.0 ms median over 2 ranks, 5 steps each' from the analysis table."""
    a = analysis(d)
    if not a:
        return None
    ranks = a.get("ranks") or {}
    times = [t for r in ranks.values() if (t := (r.get("mean_us") or {}).get("step_time")) is not None]
    if not times:
        return None
    med = statistics.median(times)
    steps = sorted({r.get("steps") for r in ranks.values() if r.get("steps") is not None}) or [0]
    per = f"{plural(steps[0], 'step')} each" if len(steps) == 1 else f"{steps[0]}–{steps[-1]} steps each"
    world = a.get("world_size")
    of = f" of {world}" if world and world != len(ranks) else ""
    launcher = (d.get("facts") or {}).get("run.launcher")
    by = f" ({launcher})" if isinstance(launcher, str) and launcher else ""
    return f"{med / 1000:.1f} ms median over {plural(len(ranks), 'rank')}{of}{by}, {per}"


def _first_failure(d: dict) -> dict | None:
    return next((f for f in findings(d) if f.get("category") in FAILURE_CATEGORIES), None)


def _deciding(d: dict) -> dict | None:
    v = d.get("verdict") or {}
    if v.get("failed"):
        return _first_failure(d)
    return next((f for f in findings(d) if v.get("rule") and f.get("rule") == v.get("rule")), None)


def _problem_line(p: dict) -> str:
    when = ""
    if isinstance(p.get("time"), (int, float)):
        when = " at " + _dt.datetime.fromtimestamp(p["time"], _dt.timezone.utc).strftime("%H:%M:%S UTC")
    what = (p.get("type") or (p.get("kind") == "signal" and p.get("signal")) or p.get("kind") or "error").rsplit(
        ".", 1
    )[-1]
    who = f"rank {p['rank']}" if p.get("rank") is not None else "a process"
    if p.get("step") == 0:  # (step: the steps the rank had completed)
        return f"{who}: {what}{when}, before any step completed"
    step = f", step {p['step']}" if p.get("step") is not None else ""
    return f"{who}: {what}{step}{when}"


def partial_note(d: dict) -> str:
    """The partial-result sentence of the Markdown and HTML reports: always with its reason."""
    reasons = [r for r in partial_reasons(d) if not _only_a_note(r)] or [
        (
            "the run failed, so the recorded steps may not be typical"
            if (d.get("verdict") or {}).get("failed")
            else "the run did not complete every recorded step on every rank"
        )
    ]
    return "; ".join(reasons[:3])


def _only_a_note(warning: str) -> bool:
    """A warning that makes nothing partial: another JSON file beside the traces, which discovery names
    as 'ignored …' (bundle.discover), not a trace of the job that could not be read ('skipped …')."""
    return warning.startswith("ignored ") or warning.endswith(", after the recorded window")


def partial_reasons(d: dict) -> list[str]:
    """Why a result is partial, in words; never the bare word without its reason."""
    out = [w for w in d.get("warnings") or []]
    a = analysis(d) or {}
    world, present = a.get("world_size"), a.get("ranks_present") or []
    if world and len(present) < world and not any("missing:" in w for w in out):
        missing = sorted(set(range(world)) - set(present))
        out.append(f"traces from {len(present)} of {world} ranks (missing: {compact_ranks(missing)})")
    if d.get("analysis") is None and not any("performance not assessed" in w for w in out):
        out.append("no profiler traces: performance not assessed, logs only")
    facts = d.get("facts") or {}
    status = facts.get("run.status")
    if facts.get("run.interrupted_by"):
        out.append(interrupted_line(facts))
    elif status == "partial" and not out:
        out.append("the run ended before every rank finished its recorded window")
    return out


def interrupted_line(facts: dict) -> str:
    """'interrupted by you (Ctrl-C) at step 61, after the recorded window' from the bundle facts."""
    by, step = facts.get("run.interrupted_by"), facts.get("run.interrupted_at_step")
    who = "interrupted by you (Ctrl-C)" if by == "SIGINT" else f"stopped by {by}"
    at = f" at step {step}" if isinstance(step, int) and step > 0 else " before the first step"
    complete = facts.get("run.status") == "complete"
    return who + at + (", after the recorded window" if complete else ", before the recorded window was complete")


def _as_typed(path: str) -> str:
    """An input as the user would type it here, quoted for the shell: relative to the current folder
    when it lies under it, ``~/…`` under the home folder, else as given (a URL stays a URL)."""
    from pathlib import Path

    p = Path(path)
    if "://" not in str(path) and p.is_absolute():
        for base, lead in ((Path.cwd(), ""), (Path.home(), "~/")):
            try:
                rel = str(p.relative_to(base))
            except ValueError:
                continue
            return lead + command([rel]) if rel != "." else (lead.rstrip("/") or ".")
    return command([str(path)])


def next_step(d: dict, fix: dict | None, rule: str | None, report_dir: str | None = None) -> tuple[str, str, list[str]]:
    """The one command to run next, what it is for, and the commands to compare after the fix: measure
    the fix on the same job when `run --try` can apply it and the analysis stored it as worth a trial
    (``worth_a_trial``: predicted above its [trial] min_predicted_speedup; a renderer reads the document, no
    threshold), else keep the files for the ticket."""
    facts = d.get("facts") or {}
    cmd = facts.get("run.command")
    inputs = " ".join(_as_typed(p) for p in d.get("inputs") or []) or "RUN_FOLDER"
    failed = (d.get("verdict") or {}).get("failed")
    # the prediction the analysis stored with the fix (trial/predict.annotate): the card computes none of its own
    predicted = fix.get("predicted_speedup") if fix and cmd and rule and not failed and fix.get("knob") else None
    if fix and predicted and fix.get("worth_a_trial") and not d.get("trial"):
        return (
            f"ddpdoctor run --try {rule} -- {cmd}",
            f"runs the job with and without {fix['knob']}={fix['value']} and measures the difference "
            f"(predicted: up to {predicted:.2f}x)",
            [],
        )
    after = (
        [f"ddpdoctor run --out after -- {cmd}", f"ddpdoctor compare {inputs} after"]
        if cmd and fix and not failed
        else []
    )
    no_try = ""  # a fix predicted at no gain never leads: the card's "Will not help here" line says it
    if report_dir:
        return (
            "",
            f"attach {report_dir}/report.html (one file, plots inside) to the ticket and paste "
            f"report.md into its text{no_try}",
            after,
        )
    return (
        f"ddpdoctor analyze {inputs} --report {report_name(d.get('inputs') or [])}",
        f"the ticket's files{no_try}",
        after,
    )


def report_name(inputs: list[str]) -> str:
    """The folder a report of these inputs is suggested into: named after the first input (a bundle
    `runs/exp3/` → `report-exp3`), so reports of different runs do not land in one folder."""
    import re
    from pathlib import PurePath

    name = PurePath(str(inputs[0]).rstrip("/")).name if inputs else ""
    for ext in (".gz", ".json", ".pt.trace", ".tar", ".tgz"):
        name = name.removesuffix(ext)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return f"report-{name}" if name else "ddpdoctor-report"


def render_card(d: dict, width: int = WIDTH, verbose_hint: bool = True, report_dir: str | None = None) -> list[str]:
    v = d.get("verdict") or {}
    lines: list[str] = []
    deciding = _deciding(d)
    perf = v.get("label") or (f"{v['bottleneck']}-bound" if v.get("bottleneck") else None)
    conf = (
        f"confidence {v.get('confidence_label')} ({v['confidence']:.2f})" if v.get("confidence") is not None else None
    )
    if v.get("failed"):
        title = (deciding or {}).get("title") or "see the findings below"
        lines += wrap(f"the run failed: {title}", width, "Verdict: ", " " * 9)
    else:
        lines += wrap(" — ".join(x for x in (perf or _no_verdict(v), conf) if x), width, "Verdict: ", " " * 9)
    why = (deciding or {}).get("summary") if v.get("failed") else verdict_summary(d)
    why_lines = wrap(why or v.get("summary") or "", width, "  ")
    if len(why_lines) > MAX_WHY_LINES:
        last = why_lines[MAX_WHY_LINES - 1]
        last = last.rstrip(" ,;:") + " …" if len(last) <= width - 2 else cut(last, width)
        why_lines = why_lines[: MAX_WHY_LINES - 1] + [last]
    lines += why_lines
    lines.append("")
    lines += _numbers(d, v, perf, conf, width)
    partial = d.get("partial") or d.get("analysis") is None
    for reason in partial_reasons(d)[:3]:
        label = "partial:" if partial and not _only_a_note(reason) else "note:"
        lines += wrap(reason, width, f"  {label:<12}", " " * 14)
    fix, rule, source = _first_fix(d, deciding)
    futile = _will_not_help(d, deciding, source)
    if fix:
        lines.append("")
        head = f"Fix first [{rule}]: " if deciding or v.get("bottleneck") else f"Worth a look [{rule}]: "
        lines += wrap(fix.get("title") or "", width, head, "  ")
        if source is not None and source is not deciding and source.get("title"):
            # the fix comes from another finding than the verdict's (a correctness bug before a speed-up)
            lines += wrap(f"({source['title']})", width, "  ", "   ")
        lines += fix_body(fix.get("change") or "", width)
        if fix.get("not_recorded"):
            lines += wrap(
                "this run did not record " + ", ".join(fix["not_recorded"]) + "; check it applies", width, "  (", "   "
            )
            lines[-1] += ")"
    if futile and not fix:
        lines.append("")
    lines += _futile_lines(futile[:MAX_FUTILE], width, after_fix=bool(fix))
    others = [
        f
        for f in findings(d)
        if f is not deciding and f is not source and f.get("rule") != rule and _worth_listing(f, d)
    ]  # shown once
    if others:
        lines.append("")
        lines.append("Also found:")
        for f in others[:MAX_OTHERS]:
            least = "at least " if f.get("speedup_is_lower_bound") else ""
            cost = f" — {least}{100 * f['cost']:.0f} % of the step" if f.get("cost") is not None else ""
            lines.append(cut(f"  [{f.get('rule')}] {f.get('title')}{cost}", width))
        if len(others) > MAX_OTHERS:
            lines.append(f"  … and {len(others) - MAX_OTHERS} more (-v)")
    cmd, why, after = next_step(d, fix, rule, report_dir)
    lines.append("")
    if (d.get("trial") or {}).get("line"):
        lines += wrap(d["trial"]["line"], width, "Trial: ", " " * 7)
    why += " (-v: all findings)" if verbose_hint else ""
    why += "; after the fix:" if after else ""
    if cmd:
        lines += shell(cmd, width, "Next: ", " " * 8)
        lines += wrap(why, width, "      ")
    else:
        lines += wrap(why, width, "Next: ", " " * 6)
    for c in after:  # each on lines of its own, so that it pastes whole
        lines += shell(c, width, " " * 8, " " * 10)
    return lines


# A finding about the recording rather than the workload (its rule's `order = "recording"`: the host was
# contended) is context, not a cost: on the card it is listed only when it changed the verdict (a cost set
# aside as machine noise) or the measured contention is material (other processes or steal took at least
# this share of the host's CPU time); `-v` lists it always.
RECORDING = "recording"
CONTENTION_MATERIAL_SHARE = 0.5


def _at_line(f: dict | None, d: dict) -> bool:
    """A finding within the step-to-step noise of the threshold that made it fire (rules_engine/edge.py), other
    than the verdict's own: the verdict names it when it was material; the card neither lists nor fixes it."""
    f = f or {}
    return bool((f.get("edge") or {}).get("at_line")) and f.get("rule") != (d.get("verdict") or {}).get("rule")


def _worth_listing(f: dict, d: dict) -> bool:
    if _at_line(f, d):
        return False
    if f.get("order") != RECORDING:
        return True
    if any("machine noise" in str(c.get("why_not") or "") for c in d.get("costs") or []):
        return True
    facts = d.get("facts") or {}
    taken = [facts.get(k) for k in ("host.contention.other_busy_share", "host.contention.steal_share")]
    return any(isinstance(x, (int, float)) and x >= CONTENTION_MATERIAL_SHARE for x in taken)


def _no_verdict(v: dict) -> str:
    return v.get("label") or "no performance verdict"


def _numbers(d: dict, v: dict, perf: str | None, conf: str | None, width: int) -> list[str]:
    out: list[str] = []
    facts = d.get("facts") or {}
    if v.get("failed"):
        first = facts.get("run.first_problem")
        if isinstance(first, dict):
            out += _num("first error", _problem_line(first), width)
        code = facts.get("run.exit_code")
        if code not in (None, 0):
            out += _num("exit code", str(code), width)
        if perf:
            label = f" ({v.get('confidence_label')} {v['confidence']:.2f})" if v.get("confidence") is not None else ""
            out += _num("recorded", f"{perf}{label}, which the failure may distort", width)
    step = step_summary(d)
    if step:
        out += _num("step time", step, width)
    if isinstance(facts.get("run.window.steady_note"), str):  # the window waited for a steady state
        out += _num("window", facts["run.window.steady_note"], width)
    top = next((c for c in d.get("costs") or [] if c.get("rule") == v.get("rule")), None)
    if top and top.get("cost") is not None and not v.get("failed"):
        bound = "at least" if v.get("speedup_is_lower_bound") else "up to"
        gain = f" — {bound} {v['expected_speedup']:.2f}x faster without it" if v.get("expected_speedup") else ""
        if gain and f"{v['expected_speedup']:.2f}x" in (verdict_summary(d) or ""):
            gain = ""  # the verdict's sentence above already says it: each number once on the card
        least = "at least " if v.get("speedup_is_lower_bound") else ""
        share = f"{100 * top['cost']:.0f} %"
        if gain or f"{share} of the step" not in (verdict_summary(d) or ""):  # (else the sentence above said both)
            out += _num("cost", f"{least}{share} of each step{gain}", width)
    hints = v.get("confidence_hints") or []
    if hints and not v.get("failed"):
        out += _num("confidence", hints[0], width)
    # (a failed run, or one without traces, recorded no steps to judge: its summary says what it has)
    if not out and v.get("summary") and not perf and not v.get("failed") and d.get("analysis") is not None:
        out += _num("status", "nothing material to fix in the recorded steps", width)
    return out


def _first_fix(d: dict, deciding: dict | None) -> tuple[dict | None, str | None, dict | None]:
    """The first fix of the first finding that has one, in the document's order of findings, which
    rules/metrics.toml [order] sets (a failure, then a correctness bug, then the verdict's finding, …);
    on a failed run, the deciding failure's own fix."""
    v = d.get("verdict") or {}
    ordered = ([deciding] if deciding and v.get("failed") else []) + findings(d)
    for f in ordered:
        if f is not deciding and _at_line(f, d):
            continue  # within the step-to-step noise of its threshold: not what to change first
        # a fix predicted at no gain never leads (trial/predict.annotate put it last in its finding)
        worth = [fx for fx in (f or {}).get("fixes") or [] if not no_gain(fx)]
        if worth:
            return worth[0], f.get("rule"), f
    return None, None, None


MAX_FUTILE = 2


def _will_not_help(d: dict, deciding: dict | None, source: dict | None) -> list[dict]:
    """The fixes `run --try` could apply that the analysis predicts at no gain, of the finding the first fix comes
    from or of the verdict's own: said plainly, so that the user does not spend a trial on them."""
    out = []
    for f in (source, deciding):
        for fx in (f or {}).get("fixes") or []:
            if no_gain(fx) and fx not in out:
                out.append(fx)
    return out


def _futile_lines(fixes: list[dict], width: int, after_fix: bool) -> list[str]:
    """'Will not help here: ddp.bucket_cap_mb=9, predicted at 1.00x (why); ddp.comm_hook=fp16, 1.00x.'"""
    if not fixes:
        return []
    parts = []
    for n, fx in enumerate(fixes):
        change = f"{fx.get('knob')}={fx.get('value')}"
        if n:
            parts.append(f"{change}, {fx['predicted_speedup']:.2f}x")
            continue
        note = str(fx.get("prediction_note") or "")
        why = note.split("; ", 1)[1] if "; " in note else note.split(": ", 1)[-1]
        parts.append(f"{change}, predicted at {fx['predicted_speedup']:.2f}x" + (f" ({why})" if why else ""))
    return wrap("; ".join(parts) + ".", width, "  Will not help here: " if after_fix else "Will not help here: ", "  ")


def fix_body(change: str, width: int, max_lines: int = MAX_FIX_LINES) -> list[str]:
    """A fix's text for the card: whole when it fits in max_lines, else its first items (paragraphs,
    bullets, code blocks) that fit, never part of one: the rules write a fix's most important lines first
    (and put the bullet the evidence selects first), so what is left out is the last items; a line says
    how many. The first item is always shown whole."""
    items = block_items(change, width, cut_code=True)
    if sum(map(len, items)) <= max_lines:
        return [line for item in items for line in item]
    kept: list[str] = list(items[0])
    for n, item in enumerate(items[1:], start=1):
        if len(kept) + len(item) > max_lines - 1:
            kept.append(f"  … {plural(len(items) - n, 'more item')}: -v or the report")
            break
        kept += item
    return kept
