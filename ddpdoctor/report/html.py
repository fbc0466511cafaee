"""Self-contained HTML report of a diagnosis dict: one file, inline CSS, plots embedded as
base64 PNG, no script, no external URL (the Content-Security-Policy forbids both, so even a
string that escaped escaping could not run or fetch anything).  Every string is escaped
with :func:`html.escape`.  Order: verdict, findings with evidence and fixes, then per-rank
detail, plots, logs, warnings, facts."""

from __future__ import annotations

import base64
from collections.abc import Set as AbstractSet

from . import view
from .escape import h

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
MAX_TABLE_ROWS = 2000
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1100px;
padding:16px 24px;color:#212529}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;border-bottom:1px solid #dee2e6;padding-bottom:4px;margin-top:28px}
h3{font-size:15px;margin:18px 0 6px}
.verdict{border-left:6px solid #1d3557;background:#f1f5f9;padding:10px 14px;border-radius:4px}
.verdict.failed{border-color:#d00000;background:#fff1f0}
.gain{font-weight:600;color:#2b9348}.partial{color:#9c6500;font-weight:600}
.finding{border:1px solid #dee2e6;border-radius:6px;padding:6px 14px 10px;margin:12px 0}
.cat{display:inline-block;font-size:12px;padding:1px 7px;border-radius:9px;background:#e9ecef;margin-right:6px}
.cat.failure,.cat.network,.cat.memory{background:#ffd6d6}.cat.dataloader{background:#ffe8cc}
.cat.communication{background:#f3d9fa}.cat.imbalance{background:#d0ebff}.cat.compute{background:#d3f9d8}
pre{background:#f8f9fa;border:1px solid #e9ecef;padding:8px 10px;white-space:pre-wrap;overflow-wrap:anywhere;font-size:12.5px;border-radius:4px}
pre .add{color:#2b8a3e}pre .del{color:#c92a2a}pre .cmt{color:#868e96}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
td,th{border:1px solid #dee2e6;padding:3px 7px;text-align:right}
th{background:#f1f3f5}td.l,th.l{text-align:left;max-width:560px;overflow-wrap:anywhere}
img{max-width:100%;border:1px solid #e9ecef;margin:6px 0}figure{margin:12px 0}figcaption{font-size:12px;color:#495057}
.muted{color:#6c757d;font-size:12.5px}summary{cursor:pointer;font-weight:600}
"""


def _table(head: list[str], rows: list[list], left: AbstractSet[int] = frozenset({0})) -> str:
    th = "".join(f"<th class='l'>{h(x)}</th>" if i in left else f"<th>{h(x)}</th>" for i, x in enumerate(head))
    body = "".join(
        "<tr>"
        + "".join(f"<td class='l'>{h(c)}</td>" if i in left else f"<td>{h(c)}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows[:MAX_TABLE_ROWS]
    )
    more = (
        f"<p class='muted'>{len(rows) - MAX_TABLE_ROWS} more rows in report.json</p>"
        if len(rows) > MAX_TABLE_ROWS
        else ""
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>{more}"


def _code(change: str, lang: str) -> str:
    lines = []
    for line in change.rstrip("\n").splitlines():
        cls = ""
        if lang == "diff":
            cls = {"+": "add", "-": "del", "#": "cmt"}.get(line[:1], "")
        lines.append(f"<span class='{cls}'>{h(line)}</span>" if cls else h(line))
    return f"<pre><code>{chr(10).join(lines)}</code></pre>"


def _val(v) -> str:
    return view.evidence_value(v, 300)


def _finding(i: int, f: dict) -> str:
    ranks = f.get("ranks") or []
    rtxt = ""
    if ranks:
        rtxt = (
            f" — rank{'s' if len(ranks) > 1 else ''} "
            + ", ".join(map(str, ranks[:16]))
            + (f", … ({len(ranks)} ranks)" if len(ranks) > 16 else "")
        )
    cost = ""
    if f.get("cost") is not None and f.get("expected_speedup"):
        cost = (
            f"<span class='gain'>costs {'at least ' if f.get('speedup_is_lower_bound') else ''}"
            f"{100 * f['cost']:.0f} % of the step: {'at least' if f.get('speedup_is_lower_bound') else 'up to'} "
            f"{f['expected_speedup']:.2f}x faster if removed</span>"
        )
    out = [
        f"<div class='finding' id='finding-{i}'><h3>{i}. [{h(f.get('rule'))}] {h(f.get('title'))}{h(rtxt)}</h3>",
        f"<p><span class='cat {h(f.get('category'))}'>{h(f.get('category'))}</span>"
        f"<span class='cat'>severity {h(f.get('severity'))}</span> {cost}</p>",
        f"<p>{h(f.get('summary'))}</p>",
    ]
    ev = f.get("evidence") or {}
    if ev:
        out.append("<p class='muted'>Measured: " + h("; ".join(view.evidence_items(ev))) + "</p>")
    for fx in f.get("fixes") or []:
        out.append(f"<p><b>Fix: {h(fx.get('title'))}</b></p>")
        if (fx.get("change") or "").strip():
            out.append(_code(fx["change"], view.fix_lang(fx)))
        if fx.get("not_recorded"):
            out.append(f"<p class='muted'>Not recorded for this run: {h(', '.join(fx['not_recorded']))}</p>")
    if f.get("why") or f.get("references"):
        refs = "".join(f"<li>{h(r)}</li>" for r in f.get("references") or [])
        out.append(
            f"<details><summary>Why this matters</summary><p>{h(f.get('why') or '')}</p>"
            + (f"<ul>{refs}</ul>" if refs else "")
            + "</details>"
        )
    out.append("</div>")
    return "\n".join(out)


def _rank_rows(d: dict, ranks: list[str]) -> list[list]:
    a = view.analysis(d) or {}  # called with the ranks of the analysis: never without one
    late = (a.get("cross_rank") or {}).get("arrival_late_us") or {}
    rows = []
    for r in ranks:
        x = a["ranks"][r]
        rows.append(
            [
                r,
                x.get("steps"),
                view.ms((x.get("mean_us") or {}).get("step_time")),
                *[view.pct(view.segment(x, c, "share")) for c in view.partition(d)],
                "–" if late.get(r) is None else f"{late[r] / 1000:+.2f}",
                x.get("host") or "–",
            ]
        )
    return rows


def _ranks_section(d: dict) -> str:
    a = view.analysis(d)
    if not a:
        return ""
    head = ["rank", "steps", "step ms", *[view.LABEL[c] for c in view.partition(d)], "late ms", "host"]
    shown, note = view.select_ranks(d)
    out = [
        "<h2>Per-rank breakdown</h2><p class='muted'>Share of each rank's step time (means over its steps).</p>",
        _table(head, _rank_rows(d, shown), {0, len(head) - 1}),
    ]
    if note:
        out.append(
            f"<p class='muted'>{h(note)}</p><details><summary>All {len(view.rank_ids(d))} ranks</summary>"
            + _table(head, _rank_rows(d, view.rank_ids(d)), {0, len(head) - 1})
            + "</details>"
        )
    c = a.get("cross_rank") or {}
    items = []
    if c.get("step_time_spread_us") is not None:
        items.append(
            f"Step-time spread (max − min, median over steps): {view.ms(c['step_time_spread_us'])} ms "
            f"({view.pct(c.get('step_time_spread_share'))} of the median step)"
        )
    if c.get("imbalance_score") is not None:
        items.append(f"Imbalance score: {c['imbalance_score']:.2f} (0 = balanced)")
    for s in view.stragglers(d)[:10]:
        items.append(
            f"Straggler: rank {s['rank']} reaches the step's collectives {s['late_us'] / 1000:.2f} ms after the "
            f"median of the others ({view.pct(s.get('late_share'))} of a step; last in {s.get('steps_late')} "
            f"of {s.get('steps')} steps)"
        )
    items += list(c.get("notes") or [])
    if items:
        out.append("<h2>Across ranks</h2><ul>" + "".join(f"<li>{h(x)}</li>" for x in items) + "</ul>")
    kern = []
    for r in view.select_ranks(d, limit=3)[0][:3]:
        t = a["ranks"][r].get("timeline") or {}
        if t.get("top_kernels"):
            kern.append(
                f"<p>Rank {h(r)}, step {h(t.get('step'))} ({view.ms(t.get('duration_us'))} ms)</p>"
                + _table(
                    ["kernel", "kind", "ms", "count"],
                    [
                        [k["name"], "comm" if k.get("comm") else "compute", f"{k['us'] / 1000:.2f}", k["count"]]
                        for k in t["top_kernels"]
                    ],
                )
            )
    if kern:
        out.append("<h2>Representative step: most expensive kernels</h2>" + "".join(kern))
    return "\n".join(out)


def _logs_section(d: dict) -> str:
    events = view.log_events(d)
    if not events:
        return ""
    key = view.ordered_events(d)
    rows = [
        [
            view.event_rank(e),
            view.event_kind(e.get("kind")),
            view.plain(e.get("text"))[:500],
            f"{e.get('file', '')}:{e.get('line_no', '')}",
        ]
        for e in key
    ]
    return (
        f"<h2>Log events</h2><details open><summary>{len(key)} event{'' if len(key) == 1 else 's'}</summary>"
        + _table(["rank", "kind", "line", "where"], rows, {1, 2, 3})
        + "</details>"
    )


def render_html(d: dict, plots: list[tuple[str, str, bytes]] | None = None) -> str:
    """The HTML report; ``plots`` = [(name, title, png)] as from :func:`plots.make_plots`."""
    v = d.get("verdict") or {}
    failed = bool(v.get("failed"))
    parts = [
        f"<h1>ddpdoctor: {h(view.headline(d))}</h1>",
        f"<div class='verdict{' failed' if failed else ''}' id='verdict'><b>Verdict:</b> {h(view.verdict_summary(d))}",
    ]
    if (
        v.get("expected_speedup")
        and v.get("bottleneck")
        and f"{v['expected_speedup']:.2f}x" not in view.verdict_summary(d)
    ):
        # the upper bound of removing the cost, as report.md says it; not a promise for any one fix
        bound = "at least" if v.get("speedup_is_lower_bound") else "up to"
        parts.append(f"<br><span class='gain'>Removing it: {bound} {v['expected_speedup']:.2f}x faster steps.</span>")
    if (d.get("trial") or {}).get("line"):
        parts.append(
            f"<br><span class='gain'><b>Trial</b> (<code>ddpdoctor run --try</code>, the diagnosis below "
            f"is its baseline): {h(d['trial']['line'])}</span>"
        )
    if d.get("partial"):
        from .card import partial_note

        parts.append("<br><span class='partial'>Partial result: " + h(partial_note(d)) + "</span>")
    parts.append("</div><h2>Findings</h2>")
    fs = view.findings(d)
    parts += [_finding(i, f) for i, f in enumerate(fs, 1)] or [
        "<p>No rule fired: nothing in the evidence points to a problem the rules know.</p>"
    ]
    parts.append(_ranks_section(d))
    if plots:
        parts.append("<h2>Plots</h2>")
        for name, title, png in plots:
            parts.append(
                f"<figure id='plot-{h(name)}'><img alt='{h(title)}' src='data:image/png;base64,"
                f"{base64.b64encode(png).decode('ascii')}'><figcaption>{h(title)}</figcaption></figure>"
            )
    parts.append(_logs_section(d))
    gaps = [f"warning: {w}" for w in d.get("warnings") or []] + [f"rule error: {e}" for e in d.get("rule_errors") or []]
    gaps += [
        f"not assessed: {x.get('rule')} ({x.get('category')}) needs {', '.join(x.get('missing') or [])}"
        for x in d.get("abstained") or []
    ] + list(d.get("_plot_notes") or [])
    gaps += [f"not assessed: {x}" for x in d.get("not_assessed") or []]
    if gaps:
        parts.append(
            f"<h2>Warnings and gaps</h2><details><summary>{len(gaps)} item{'' if len(gaps) == 1 else 's'}</summary><ul>"
            + "".join(f"<li>{h(g)}</li>" for g in gaps)
            + "</ul></details>"
        )
    if d.get("facts"):
        parts.append(
            f"<h2>Facts the rules read</h2><details><summary>{len(d['facts'])} facts</summary>"
            + _table(["fact", "value"], [[k, _val(x)] for k, x in d["facts"].items()], {0, 1})
            + "</details>"
        )
    parts.append(
        f"<hr><p class='muted'>ddpdoctor {h(d.get('ddpdoctor_version', ''))}, schema {h(d.get('schema', ''))}; "
        f"inputs: {h(', '.join(map(str, d.get('inputs') or [])))}</p>"
    )
    title = f"ddpdoctor: {view.headline(d)}"
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{h(title)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(p for p in parts if p)
        + "\n</body></html>\n"
    )
