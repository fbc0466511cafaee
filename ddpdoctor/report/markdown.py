"""GitHub-flavoured Markdown report of a diagnosis dict, sized for one GitHub comment.

Order: verdict, findings (failures first, as in the JSON) with evidence and fixes, then
per-rank detail, cross-rank skew, the representative step, plots, logs, warnings and
facts — long detail folded in ``<details>``.  Every string from a trace, a log or a rule
is escaped (:mod:`ddpdoctor.report.escape`); the whole text stays under
:data:`MAX_CHARS` (detail is cut with a note, the JSON keeps everything).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..text import is_code
from . import view
from .escape import md, md_code, md_fence, md_multiline, md_prose
from .paths import localize_doc

_URL = re.compile(r"https?://[^\s<>\"'`\\]+")
MAX_CHARS = 65_536
BUDGET = 64_000  # leave room for the truncation note


def _fold(summary: str, body: str) -> str:
    return f"<details><summary>{md(summary)}</summary>\n\n{body}\n\n</details>"


def _table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _val(v) -> str:
    return md(view.evidence_value(v, 200))


def _ranks(ranks: list) -> str:
    if not ranks:
        return ""
    shown = ", ".join(map(str, ranks[:12])) + (f", … ({len(ranks)} ranks)" if len(ranks) > 12 else "")
    return f" — rank{'s' if len(ranks) > 1 else ''} {md(shown)}"


def _n(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else word + 's'}"


def verdict_section(d: dict) -> str:
    v = d.get("verdict") or {}
    lines = [f"# ddpdoctor: {md(view.headline(d))}", ""]
    summ = view.verdict_summary(d)
    if summ:
        lines.append(f"> **Verdict:** {md(summ)}")
    if v.get("expected_speedup") and v.get("bottleneck") and f"{v['expected_speedup']:.2f}x" not in (summ or ""):
        bound = "at least" if v.get("speedup_is_lower_bound") else "up to"
        lines += ["", f"Removing it: {bound} **{v['expected_speedup']:.2f}x** faster steps."]
    if (d.get("trial") or {}).get("line"):
        lines += [
            "",
            f"**Trial** (`ddpdoctor run --try`, the diagnosis below is its baseline): {md(d['trial']['line'])}",
        ]
    if d.get("partial"):
        from .card import partial_note

        lines += ["", "**Partial result:** " + md(partial_note(d))]
    return "\n".join(lines)


def finding_block(i: int, f: dict, said: str = "") -> str:
    """One finding; its summary is left out when the verdict above already says it (``said``)."""
    cost = ""
    if f.get("cost") is not None and f.get("expected_speedup"):
        low = f.get("speedup_is_lower_bound")
        cost = (
            f"costs {'at least ' if low else ''}{100 * f['cost']:.0f} % of the step, "
            f"{'at least' if low else 'up to'} {f['expected_speedup']:.2f}x faster"
        )
    cost_md = " — " + md(cost) if cost else ""
    out = [
        f"### {i}. [{md(f.get('rule'))}] {md(f.get('title'))}{_ranks(f.get('ranks') or [])}{cost_md}",
        "",
        f"*{md(f.get('category'))}, severity {md(f.get('severity'))}*"
        + (f", confidence {f['confidence']:.2f}" if isinstance(f.get("confidence"), (int, float)) else ""),
        "",
        "*Its summary is the verdict above.*"
        if f.get("summary") and f["summary"] in said
        else md_multiline(f.get("summary")),
    ]
    ev = f.get("evidence") or {}
    if ev:
        out += ["", "Measured: " + md("; ".join(view.evidence_items(ev)))]
    for fx in f.get("fixes") or []:
        change = fx.get("change") or ""
        out += ["", f"**Fix: {md(fx.get('title'))}**", ""]
        if change.strip():
            out.append(fix_markdown(fx))
        if fx.get("not_recorded"):
            out += ["", f"*Not recorded for this run: {md(', '.join(fx['not_recorded']))}*"]
    why = f.get("why")
    refs = f.get("references") or []
    if why or refs:
        body = md_multiline(why) + (
            "\n\n" + "\n".join(f"- <{r}>" if _URL.fullmatch(str(r)) else f"- {md(r)}" for r in refs) if refs else ""
        )
        out += ["", _fold("Why this matters", body)]
    return "\n".join(out)


SHELL_START = (
    "$ ",
    "export ",
    "ddpdoctor ",
    "torchrun ",
    "python ",
    "numactl ",
    "taskset ",
    "srun ",
    "sbatch ",
    "pip ",
    "NCCL_",
    "TORCH_",
    "PYTORCH_",
    "CUDA_",
    "OMP_",
)


def fix_parts(change: str) -> list[tuple[str, list[str]]]:
    """A fix's change as ("prose" | "bullet" | "code", lines), in order: prose stays prose (a paragraph or
    a bullet, a bullet's indented lines included), code lines and their comments form code blocks."""
    diff = view.fix_is_diff(change)
    parts: list[tuple[str, list[str]]] = []
    for line in change.strip("\n").splitlines():
        kind = parts[-1][0] if parts else None
        if not line.strip():
            parts.append(("gap", []))
        elif line.startswith("- ") and not diff:
            parts.append(("bullet", [line[2:].strip()]))
        elif kind == "bullet" and line.startswith("  ") and not diff:
            parts[-1][1].append(line.strip())
        elif is_code(line) or (kind == "code" and line.startswith("# ")):
            if kind == "code":
                parts[-1][1].append(line.rstrip())
            else:
                parts.append(("code", [line.rstrip()]))
        elif kind == "prose":
            parts[-1][1].append(line.strip())
        else:
            parts.append(("prose", [line.strip()]))
    return [p for p in parts if p[0] != "gap"]


def _code_lang(lines: list[str], fx: dict, diff: bool) -> str:
    if diff:
        return "diff"
    if fx.get("kind") in ("env", "command") or all(ln.strip().startswith(SHELL_START) for ln in lines):
        return "bash"
    return "python" if fx.get("kind") == "code" and not all(ln.lstrip().startswith("#") for ln in lines) else ""


def fix_markdown(fx: dict) -> str:
    """Prose as Markdown paragraphs and bullets, code in fenced blocks (diff, bash or python): English never
    sits inside a code fence, and no prose is tagged as a shell command."""
    change = fx.get("change") or ""
    diff = view.fix_is_diff(change)
    out: list[str] = []
    for kind, lines in fix_parts(change):
        if kind == "code":
            block = "\n".join(lines)
            indent = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()) if not diff else 0
            out.append(md_fence("\n".join(ln[indent:] for ln in block.splitlines()), _code_lang(lines, fx, diff)))
        elif kind == "bullet":
            item = md_prose(" ".join(lines))
            if out and out[-1].startswith("- "):
                out[-1] += "\n- " + item
            else:
                out.append("- " + item)
        else:
            out.append(md_prose(" ".join(lines)))
    return "\n\n".join(out)


def findings_section(d: dict, budget: int) -> str:
    fs = view.findings(d)
    if not fs:
        return "## Findings\n\nNo rule fired: nothing in the evidence points to a problem the rules know."
    out = ["## Findings"]
    used = 20
    said = view.verdict_summary(d) or ""
    for i, f in enumerate(fs, 1):
        block = finding_block(i, f, said)
        if used + len(block) > budget:
            out.append(f"*… {_n(len(fs) - i + 1, 'more finding')} not shown (size limit); see report.json.*")
            break
        out.append(block)
        used += len(block) + 2
    return "\n\n".join(out)


def rank_table(d: dict, all_ranks: bool = False, limit: int | None = None) -> str:
    a = view.analysis(d)
    if not a:
        return ""
    ranks = view.rank_ids(d) if all_ranks else view.select_ranks(d)[0]
    if limit is not None:
        ranks = ranks[:limit]
    cats = view.partition(d)
    late = (a.get("cross_rank") or {}).get("arrival_late_us") or {}
    rows = []
    for r in ranks:
        x = a["ranks"][r]
        rows.append(
            [
                md(r),
                md(x.get("steps")),
                view.ms((x.get("mean_us") or {}).get("step_time")),
                *[view.pct(view.segment(x, c, "share")) for c in cats],
                "–" if late.get(r) is None else f"{late[r] / 1000:+.2f}",
                md(x.get("host") or "–"),
            ]
        )
    return _table(["rank", "steps", "step ms", *[view.LABEL[c] for c in cats], "late ms", "host"], rows)


def detail_sections(d: dict, plots: list[tuple[str, str]] | None) -> list[tuple[str, Callable[[int], str]]]:
    """(name, render(max_rows)) of each detail section, in order."""
    a = view.analysis(d)
    parts = []
    if a:

        def ranks_md(n):
            ranks, note = view.select_ranks(d)
            s = "## Per-rank breakdown\n\nShare of each rank's step time (means over its steps).\n\n" + rank_table(d)
            if note:
                s += f"\n\n*{md(note)}.*\n\n" + _fold(
                    f"All {len(view.rank_ids(d))} ranks", rank_table(d, all_ranks=True, limit=n)
                )
            return s

        parts.append(("ranks", ranks_md))

        parts.append(("cross", lambda n: _cross_md(d, a, n)))
        parts.append(("step", lambda n: _step_md(d, a, n)))
    if plots:
        # no image links: a relative path breaks once the text is pasted into a GitHub or Jira comment
        parts.append(
            (
                "plots",
                lambda n: (
                    "## Plots\n\nAttach `report.html` (every plot inside, one file) or these "
                    "PNG files to the ticket:\n\n" + "\n".join(f"- `{md(p)}`: {md(t)}" for p, t in plots)
                ),
            )
        )
    elif a:
        parts.append(
            (
                "plots",
                lambda n: (
                    "## Plots\n\nThe plots are in `report.html` and `plots/` "
                    "(`ddpdoctor report report.json --format html`)."
                ),
            )
        )
    events = view.log_events(d)
    if events:

        def logs_md(n):
            key = view.ordered_events(d)
            rows = [
                [
                    md(view.event_rank(e)),
                    md(view.event_kind(e.get("kind"))),
                    md(view.plain(e.get("text"))[:300]),
                    md(f"{e.get('file', '')}:{e.get('line_no', '')}"),
                ]
                for e in key[:n]
            ]
            more = f"\n\n*{len(key) - n} more events in report.json.*" if len(key) > n else ""
            return "## Log events\n\n" + _fold(
                f"{_n(len(key), 'event')} from {_n(len((d.get('logs') or {}).get('files') or []), 'log file')}",
                _table(["rank", "kind", "line", "where"], rows) + more,
            )

        parts.append(("logs", logs_md))
    if d.get("warnings") or d.get("rule_errors") or d.get("abstained") or d.get("_plot_notes") or d.get("not_assessed"):

        def warn_md(n):
            items = [f"- warning: {md(w)}" for w in (d.get("warnings") or [])[:n]]
            items += [f"- rule error: {md(e)}" for e in d.get("rule_errors") or []]
            items += [
                f"- not assessed: {md(x.get('rule'))} ({md(x.get('category'))}) needs "
                f"{md(', '.join(x.get('missing') or []))}"
                for x in d.get("abstained") or []
            ]
            items += [f"- {md(x)}" for x in d.get("_plot_notes") or []]
            items += [f"- not assessed: {md(x)}" for x in d.get("not_assessed") or []]
            return "## Warnings and gaps\n\n" + _fold(_n(len(items), "item"), "\n".join(items))

        parts.append(("warnings", warn_md))
    if d.get("facts"):

        def facts_md(n):
            rows = [[md_code(k) if "`" not in k else md(k), _val(v)] for k, v in list(d["facts"].items())[:n]]
            return "## Facts the rules read\n\n" + _fold(_n(len(d["facts"]), "fact"), _table(["fact", "value"], rows))

        parts.append(("facts", facts_md))
    return parts


def _cross_md(d: dict, a: dict, n: int):
    """The "Across ranks" section: spreads, imbalance, the first ``n`` stragglers."""
    c = a.get("cross_rank") or {}
    lines = ["## Across ranks", ""]
    if c.get("step_time_spread_us") is not None:
        lines.append(
            f"- Step-time spread (max − min, median over steps): {view.ms(c['step_time_spread_us'])} ms "
            f"({view.pct(c.get('step_time_spread_share'))} of the median step)"
        )
    if c.get("imbalance_score") is not None:
        lines.append(f"- Imbalance score: {c['imbalance_score']:.2f} (0 = balanced)")
    for col in ("step_time", "compute", "dataloader_wait", "comm_exposed"):
        sp = view.spread(d, col)
        if sp and len(a["ranks"]) > 2:
            lines.append(
                f"- {md(view.LABEL.get(col, col.replace('_', ' ')))} per rank, ms: min {view.ms(sp['min'])}, "
                f"p10 {view.ms(sp['p10'])}, median {view.ms(sp['median'])}, p90 {view.ms(sp['p90'])}, "
                f"max {view.ms(sp['max'])}"
            )
    strag = view.stragglers(d)
    for s in strag[:n]:
        lines.append(
            f"- **Straggler: rank {md(s['rank'])}** reaches the step's collectives "
            f"{s['late_us'] / 1000:.2f} ms after the median of the others "
            f"({view.pct(s.get('late_share'))} of a step; last in {s.get('steps_late')} of "
            f"{s.get('steps')} steps)"
        )
    if not strag and len(a["ranks"]) > 1:
        lines.append("- No straggler.")
    for note in c.get("notes") or []:
        lines.append(f"- {md(note)}")
    return "\n".join(lines)


def _step_md(d: dict, a: dict, n: int):
    """The "Representative step" section: the top ``n`` kernels of up to three ranks' median step."""
    ranks, _ = view.select_ranks(d, limit=3)
    blocks = [
        "## Representative step",
        "",
        "Each rank's median-duration step; the most expensive GPU kernels in it.",
    ]
    for r in ranks[:3]:
        t = a["ranks"][r].get("timeline") or {}
        tk = (t.get("top_kernels") or [])[:n]
        if not tk:
            continue
        rows = [
            [md(k["name"]), "comm" if k.get("comm") else "compute", f"{k['us'] / 1000:.2f}", md(k["count"])] for k in tk
        ]
        blocks += [
            "",
            f"**Rank {md(r)}**, step {md(t.get('step'))} ({view.ms(t.get('duration_us'))} ms):",
            "",
            _table(["kernel", "kind", "ms", "count"], rows),
        ]
    return "\n".join(blocks) if len(blocks) > 3 else ""


def render_markdown(d: dict, plots: list[tuple[str, str]] | None = None) -> str:
    """The Markdown report; ``plots`` = [(relative path, title)] of PNG files written beside it. Paths are
    written relative to the inputs (report/paths.py): the text is for a ticket read on other machines."""
    d = localize_doc(d)
    head = verdict_section(d)
    body = findings_section(d, BUDGET // 2)
    out = [head, body]
    used = len(head) + len(body)
    cut = []
    for name, fn in detail_sections(d, plots):
        n = 2000
        while True:
            s = fn(n)
            if used + len(s) + 400 <= BUDGET or n <= 1:
                break
            n //= 4
        if used + len(s) + 400 > BUDGET:
            cut.append(name)
            continue
        if s:
            out.append(s)
            used += len(s) + 2
    footer = (
        f"---\n*ddpdoctor {md(d.get('ddpdoctor_version', ''))}, schema {md(d.get('schema', ''))}; "
        f"inputs: {md(', '.join(map(str, d.get('inputs') or [])))[:500]}*"
    )
    if cut:
        footer = f"*Left out to fit one GitHub comment: {', '.join(cut)} (see report.json).*\n\n" + footer
    text = "\n\n".join(out + [footer]) + "\n"
    if len(text) > MAX_CHARS:  # last resort; cannot happen with the budgets above unless a finding is huge
        text = text[: MAX_CHARS - 200] + "\n\n*… truncated to fit one GitHub comment; see report.json.*\n"
    return text
