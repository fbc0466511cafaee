"""The full terminal view (``analyze -v``, ``report --format terminal -v``): every finding with
every fix, what was not assessed, the per-rank table, the cross-rank numbers.  Reads only
the diagnosis document, like every other renderer; plain text at a given width."""

from __future__ import annotations

from ..bundle.discover import compact_ranks
from ..text import WIDTH, block, cut, plural, wrap
from .card import partial_reasons, render_card
from .view import analysis, evidence_value, findings, rank_ids, select_ranks

PERFORMANCE = ("dataloader", "communication", "compute", "imbalance", "config")
# table columns: (key, header); "transfer" is exposed communication minus the wait for late peers
TABLE = (
    ("compute", "compute"),
    ("transfer", "comm"),
    ("comm_sync_wait", "sync wait"),
    ("dataloader_wait", "loader"),
    ("memcpy", "memcpy"),
    ("host_idle", "host idle"),
    ("other", "other"),
)


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def render_full(d: dict, width: int = WIDTH, report_dir: str | None = None) -> list[str]:
    lines = render_card(d, width, verbose_hint=False, report_dir=report_dir)
    lines += ["", "─" * min(width, 40), "Every finding", ""]
    for i, f in enumerate(findings(d), 1):
        ranks = f.get("ranks") or []
        on = (
            (
                f" (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks[:12]))}"
                + (f", … {len(ranks)} in all" if len(ranks) > 12 else "")
                + ")"
            )
            if ranks
            else ""
        )
        least = "at least " if f.get("speedup_is_lower_bound") else ""
        cost = f" — {least}{100 * f['cost']:.0f} % of the step" if f.get("cost") is not None else ""
        lines += wrap(f"[{f.get('rule')}] {f.get('title')}{on}{cost}", width, f"{i}. ", "   ")
        lines += wrap(f.get("summary") or "", width, "   ")
        ev = f.get("evidence") or {}
        if ev:
            lines += wrap(
                "; ".join(f"{k.replace('_', ' ')} {evidence_value(v, 80)}" for k, v in ev.items()),
                width,
                "   measured: ",
                "   ",
            )
        for fx in f.get("fixes") or []:
            lines += wrap(fx.get("title") or "", width, "   fix: ", "        ")
            lines += block(fx.get("change") or "", width, "      ")
            if fx.get("not_recorded"):
                lines += wrap("this run did not record " + ", ".join(fx["not_recorded"]), width, "      (", "       ")
                lines[-1] += ")"
        lines.append("")
    lines += _not_assessed(d, width)
    for e in d.get("rule_errors") or []:
        lines += wrap(e, width, "rule error: ", "  ")
    lines += _table(d, width)
    return lines


def _not_assessed(d: dict, width: int) -> list[str]:
    out = []
    abstained = d.get("abstained") or []
    if d.get("analysis") is None:
        abstained = [a for a in abstained if a.get("category") not in PERFORMANCE]
    cats: dict[str, list] = {}
    for a in abstained:
        cats.setdefault(a["category"], []).append(a)
    for c, lst in sorted(cats.items()):
        missing = sorted({m for a in lst for m in a.get("missing") or []})
        out += wrap(
            f"{c} ({', '.join(a['rule'] for a in lst)}): needs {', '.join(missing)}",
            width,
            "Not assessed, evidence missing: ",
            "  ",
        )
    for line in d.get("not_assessed") or []:
        out += wrap(line, width, "Not assessed: ", "  ")
    return out


def _table(d: dict, width: int) -> list[str]:
    a = analysis(d)
    if not a:
        return []
    ranks = a.get("ranks") or {}
    shown, note = select_ranks(d)
    cols = [(k, h) for k, h in TABLE if any(_share(ranks[r], k) is not None for r in shown)]
    first = ranks[rank_ids(d)[0]]
    kinds = sorted({(r.get("device_kind") or "?").upper() for r in ranks.values()})
    backends = sorted({r.get("backend") for r in ranks.values() if r.get("backend")})
    out = [""]
    out += wrap(
        f"{plural(len(ranks), 'rank')}"
        + (f" of world size {a['world_size']}" if a.get("world_size") else "")
        + f", {'/'.join(kinds)} trace"
        + (f" ({', '.join(backends)})" if backends else "")
        + f", steps from {first.get('step_source')}",
        width,
        "Per rank: ",
        "  ",
    )
    out += wrap("; ".join(partial_reasons(d)), width, "  partial: ", "  ") if d.get("partial") else []
    out += _hosts(a, width)
    out += _decoders(ranks, width)
    out.append("")
    head = f"{'rank':>5} {'steps':>5} {'step ms':>8}" + "".join(f" {h:>9}" for _, h in cols)
    out.append(cut(head, width))
    for r in shown:
        row = ranks[r]
        step = (row.get("mean_us") or {}).get("step_time")
        out.append(
            cut(
                f"{r:>5} {row.get('steps', 0):>5} {'–' if step is None else f'{step / 1000:.2f}':>8}"
                + "".join(f" {_pct(_share(row, k)):>9}" for k, _ in cols),
                width,
            )
        )
    if note:
        out += wrap(note, width, "  (", "   ")
        out[-1] += ")"
    out += wrap(
        "comm: communication that compute does not hide, without the wait for late peers (sync wait)", width, "  ", "  "
    )
    out += _costs(d, width) + _cross(d, a, width)
    notes = sorted(
        {n for r in ranks.values() for n in r.get("notes") or []} | set((a.get("cross_rank") or {}).get("notes") or [])
    )
    for n in notes:
        out += wrap(n, width, "note: ", "  ")
    out += _hta(a, width)
    return out


def _hosts(a: dict, width: int) -> list[str]:
    """Which host recorded which ranks, and how the host was known (bundle/hosts.py)."""
    by = (a.get("hosts") or {}).get("by_rank") or {}
    if not by:
        return []
    groups: dict[tuple, list[int]] = {}
    for r, x in by.items():
        groups.setdefault((str(x.get("host")), str(x.get("source"))), []).append(int(r))
    sources = {src for _, src in groups}
    parts = [
        f"{host} (rank{'s' if len(rs) > 1 else ''} {compact_ranks(sorted(rs))}"
        + (f", from the {_SOURCE.get(src, src)})" if len(sources) > 1 else ")")
        for (host, src), rs in sorted(groups.items(), key=lambda kv: min(kv[1]))
    ]
    tail = f"; from the {_SOURCE.get(next(iter(sources)), next(iter(sources)))}" if len(sources) == 1 else ""
    return wrap(", ".join(parts) + tail, width, "  hosts: ", "  ")


def _decoders(ranks: dict, width: int) -> list[str]:
    """Which trace reader decoded which ranks (trace/decode.py: the C reader, or msgspec and why)."""
    groups: dict[str, list[int]] = {}
    for r, row in ranks.items():
        if row.get("decoder"):
            groups.setdefault(row["decoder"], []).append(int(r))
    if len(groups) == 1:
        return wrap(next(iter(groups)), width, "  decoded by: ", "  ")
    parts = [
        f"{dec} (rank{'s' if len(rs) > 1 else ''} {compact_ranks(sorted(rs))})"
        for dec, rs in sorted(groups.items(), key=lambda kv: min(kv[1]))
    ]
    return wrap("; ".join(parts), width, "  decoded by: ", "  ") if parts else []


_SOURCE = {
    "trace": "traces' host_name",
    "file name": "trace handler's file names ({host}_{pid}.…)",
    "folder": "folder each trace was given in",
}


def _share(row: dict, key: str):
    share = row.get("share") or {}
    if key != "transfer":
        return share.get(key)
    exposed = share.get("comm_exposed")
    if exposed is None:
        return None
    return max(0.0, exposed - min(exposed, share.get("comm_sync_wait") or 0.0))


def _costs(d: dict, width: int) -> list[str]:
    costs = d.get("costs") or []
    if not costs:
        return []
    parts = [
        f"{c.get('label')} {_pct(c.get('cost'))} [{c.get('rule')}]"
        + ("" if c.get("material") and c.get("eligible") else f" (not decisive: {c.get('why_not') or 'small'})")
        for c in costs[:5]
    ]
    return wrap("; ".join(parts), width, "Costs, ranked: ", "  ")


def _cross(d: dict, a: dict, width: int) -> list[str]:
    cr = a.get("cross_rank") or {}
    out = []
    if cr.get("step_time_spread_us") is not None:
        score = cr.get("imbalance_score")
        out += wrap(
            f"step-time spread {cr['step_time_spread_us'] / 1000:.2f} ms "
            f"({_pct(cr.get('step_time_spread_share'))} of the median step); imbalance score "
            f"{'–' if score is None else f'{score:.2f}'} (0 = balanced); "
            f"{plural(cr.get('matched_collectives') or 0, 'collective')} matched",
            width,
            "Across ranks: ",
            "  ",
        )
    for st in (cr.get("stragglers") or [])[:5]:
        out += wrap(
            f"rank {st['rank']} reaches the step's collectives {st['late_us'] / 1000:.2f} ms after the "
            f"median of the other ranks ({_pct(st.get('late_share'))} of a step; last to arrive in "
            f"{st.get('steps_late')} of {plural(st.get('steps') or 0, 'step')})",
            width,
            "Straggler: ",
            "  ",
        )
    shapes = cr.get("input_shapes_by_rank") or {}
    if len({str(v) for v in shapes.values()}) > 1:
        out += wrap("; ".join(f"rank {r} {x}" for r, x in sorted(shapes.items())), width, "Input shapes: ", "  ")
    return out


def _hta(a: dict, width: int) -> list[str]:
    hta = a.get("hta") or {}
    if not hta:
        return []
    if hta.get("error"):
        return wrap(f"unavailable: {hta['error']}", width, "HTA cross-check ", "  ")
    out = []
    for r, h in list((hta.get("ranks") or {}).items())[:2]:
        out += wrap(
            f"compute {_pct(h.get('compute_share'))}, GPU idle {_pct(h.get('idle_share'))}, comm overlapped by "
            f"compute {_pct(h.get('comm_comp_overlap'))}; idle causes: host wait "
            f"{_pct(h.get('idle_host_wait'))}, kernel wait {_pct(h.get('idle_kernel_wait'))}",
            width,
            f"HTA cross-check, rank {r} (whole trace): ",
            "  ",
        )
    return out
