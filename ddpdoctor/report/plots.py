"""Plots of a diagnosis dict as PNG bytes (matplotlib's Agg canvas: no display, no pyplot
state; matplotlib is imported only here, and only when a plot is made).

* ``breakdown``: per-rank stacked bars of the mean step-time partition; with many ranks
  the fastest / median / slowest / stragglers, beside a box plot of every rank per category.
* ``timeline``: one representative step (each rank's median-duration step) per shown rank.
* ``skew``: late arrival (weighted by the wait it causes) and compute time per rank (stragglers red).
* ``failure``: for a failed run only, log events per rank in time order (OOM, timeouts, exits, …).
"""

from __future__ import annotations

import io

from . import view

DPI = 100
EVENT_STYLE = {
    "oom": ("#d00000", "X"),
    "nccl_timeout": ("#9d0208", "s"),
    "gloo_timeout": ("#9d0208", "s"),
    "exception": ("#e85d04", "D"),
    "crash": ("#6a040f", "X"),
    "killed": ("#370617", "v"),
    "exit": ("#495057", "v"),
    "mismatch": ("#7209b7", "P"),
    "peer_error": ("#f48c06", "o"),
    "torchrun_root": ("#000000", "*"),
    "progress": ("#adb5bd", "."),
}


def _fig(w: float, h: float, ncols: int = 1, width_ratios=None):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=DPI)
    axes = fig.subplots(1, ncols, gridspec_kw={"width_ratios": width_ratios} if width_ratios else None)
    return fig, axes


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def breakdown(d: dict) -> bytes | None:
    a = view.analysis(d)
    if not a:
        return None
    ranks, note = view.select_ranks(d)
    cats = view.partition(d)
    many = note is not None
    fig, axes = _fig(10 if many else 8, 4.2, 2 if many else 1, [3, 2] if many else None)
    ax = axes[0] if many else axes
    x = list(range(len(ranks)))
    bottom = [0.0] * len(ranks)
    for c in cats:
        vals = [(view.segment(a["ranks"][r], c) or 0.0) / 1000 for r in ranks]
        ax.bar(x, vals, bottom=bottom, color=view.COLOR[c], label=view.LABEL[c], width=0.7)
        bottom = [b + v for b, v in zip(bottom, vals)]
    strag = {str(s["rank"]) for s in view.stragglers(d)}
    ax.set_xticks(x, [f"{r}*" if r in strag else r for r in ranks], rotation=90 if len(ranks) > 12 else 0)
    ax.set_xlabel("rank" + (" (* straggler)" if strag & set(ranks) else ""))
    ax.set_ylabel("ms per step (mean)")
    ax.set_title("Where each rank's step time goes" + (f"\n({note})" if many else ""), fontsize=9 if many else 11)
    ax.legend(
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14 if len(ranks) <= 12 else -0.24),
        ncol=3,
        frameon=False,
    )
    if many:
        ax2 = axes[1]
        data = [[(view.segment(r, c) or 0.0) / 1000 for r in a["ranks"].values()] for c in cats]
        try:
            ax2.boxplot(data, orientation="horizontal", whis=(5, 95), widths=0.6)
        except TypeError:  # matplotlib < 3.10
            ax2.boxplot(data, vert=False, whis=(5, 95), widths=0.6)
        ax2.set_yticks(range(1, len(cats) + 1), [view.LABEL[c] for c in cats], fontsize=8)
        ax2.set_xlabel("ms per step")
        ax2.set_title(f"All {len(a['ranks'])} ranks (box: quartiles, whiskers: p5–p95)", fontsize=9)
    return _png(fig)


def timeline(d: dict, max_ranks: int = 8) -> bytes | None:
    a = view.analysis(d)
    if not a:
        return None
    ranks, _ = view.select_ranks(d, limit=max_ranks)
    ranks = [r for r in ranks if (a["ranks"][r].get("timeline") or {}).get("segments") is not None]
    if not ranks:
        return None
    fig, ax = _fig(9, 1.0 + 0.45 * len(ranks))
    seen = set()
    for i, r in enumerate(ranks):
        t = a["ranks"][r]["timeline"]
        dur = (t.get("duration_us") or 0.0) / 1000
        ax.broken_barh([(0, dur)], (i - 0.35, 0.7), color="#e9ecef", edgecolor="#ced4da")
        for c in view.partition(d):
            segs = [(s / 1000, (e - s) / 1000) for s, e in (t.get("segments") or {}).get(c) or []]
            if segs:
                ax.broken_barh(segs, (i - 0.35, 0.7), color=view.COLOR[c], label=None if c in seen else view.LABEL[c])
                seen.add(c)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("ms from the start of the step (grey: idle, nothing attributed)")
    ax.set_title("One representative step per rank (each rank's median-duration step)", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _png(fig)


def skew(d: dict) -> bytes | None:
    a = view.analysis(d)
    if not a or len(a["ranks"]) < 2:
        return None
    ids = view.rank_ids(d)
    late = (a.get("cross_rank") or {}).get("arrival_late_us") or {}
    strag = {str(s["rank"]) for s in view.stragglers(d)}
    from matplotlib.ticker import MaxNLocator

    fig, axes = _fig(9, 3.4, 2)
    for ax, vals, title in (
        (axes[0], [(late.get(r) or 0.0) / 1000 for r in ids], "Late arrival (wait-weighted)"),
        (
            axes[1],
            [((a["ranks"][r].get("mean_us") or {}).get("compute") or 0.0) / 1000 for r in ids],
            "Compute per rank",
        ),
    ):
        x = [int(r) for r in ids]
        colors = ["#d00000" if r in strag else "#457b9d" for r in ids]
        if len(ids) <= 32:
            ax.bar(x, vals, color=colors)
            ax.set_xticks(x, [str(r) for r in x], fontsize=8 if len(x) <= 16 else 6)  # ranks are integers
        else:
            ax.scatter(x, vals, c=colors, s=8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title + (" (red: straggler)" if strag else ""), fontsize=9)
        ax.set_xlabel("rank")
        ax.set_ylabel("ms per step")
        ax.axhline(0, color="#495057", linewidth=0.6)
    return _png(fig)


def failure(d: dict) -> bytes | None:
    """Only for a failed run: its log events per rank, in time order across ranks (an untimed line takes
    the time of the last timestamped line before it in its file); without enough timestamps, each rank's
    events in their own order, and the axis says positions are not comparable across ranks."""
    if not (d.get("verdict") or {}).get("failed"):
        return None
    events = [e for e in view.log_events(d) if e.get("kind")]
    if not events:
        return None
    timed, complete = view.timed_events(d)
    if timed and complete and len({t for t, _ in timed}) > 1:
        t0 = timed[0][0]
        pts = [(t - t0, e) for t, e in timed]
        xlabel = "seconds since the first log event (untimestamped lines: time of the line before)"
    else:
        seen: dict = {}
        pts = []
        for e in sorted(events, key=lambda e: (str(e.get("file")), e.get("line_no") or 0)):
            k = e.get("rank")
            seen[k] = seen.get(k, 0) + 1
            pts.append((seen[k], e))
        xlabel = "event number within each rank's log (no timestamps: not comparable across ranks)"
    if len(pts) > 400:  # keep every failure event, thin out the progress lines
        key = [p for p in pts if p[1]["kind"] != "progress"]
        rest = [p for p in pts if p[1]["kind"] == "progress"]
        pts = key + rest[:: max(1, len(rest) // max(1, 400 - len(key)))]
    ranks = sorted({e["rank"] for _, e in pts if e.get("rank") is not None})
    row = {r: i for i, r in enumerate(ranks)}
    unknown = len(ranks)
    fig, ax = _fig(9, 1.4 + 0.32 * min(len(ranks) + 1, 24))
    by_kind: dict[str, list] = {}
    for x, e in pts:
        by_kind.setdefault(e["kind"], []).append((x, row.get(e.get("rank"), unknown)))
    for kind, xy in sorted(by_kind.items(), key=lambda kv: kv[0] == "progress", reverse=True):
        color, marker = EVENT_STYLE.get(kind, ("#1d3557", "o"))
        ax.scatter(
            [p[0] for p in xy],
            [p[1] for p in xy],
            c=color,
            marker=marker,
            s=14 if kind == "progress" else 46,
            label=view.event_kind(kind),
            zorder=1 if kind == "progress" else 3,
        )
    unranked = [e for _, e in pts if e.get("rank") is None]
    who = "launcher" if unranked and all(view.from_launcher(e) for e in unranked) else "no rank named"
    labels = [f"rank {r}" for r in ranks] + ([who] if unranked else [])
    if len(labels) <= 24:
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.margins(x=0.05, y=0.25)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_title("Log events per rank of the failed run", fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _png(fig)


PLOTS = (
    ("failure_events", "Log events per rank", failure),
    ("breakdown", "Step-time breakdown per rank", breakdown),
    ("timeline", "One representative step per rank", timeline),
    ("skew", "Cross-rank skew", skew),
)


def make_plots(d: dict) -> list[tuple[str, str, bytes]]:
    """(file stem, title, PNG bytes) of every plot the diagnosis supports; a plot that fails
    is left out with a note in ``d["_plot_notes"]`` rather than stopping the report."""
    out = []
    for name, title, fn in PLOTS:
        try:
            png = fn(d)
        except Exception as exc:  # noqa: BLE001 - one bad plot must not lose the report
            d.setdefault("_plot_notes", []).append(f"plot {name} not drawn: {type(exc).__name__}: {exc}")
            continue
        if png:
            out.append((name, title, png))
    return out
