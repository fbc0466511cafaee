"""Terminal summary of an analysis: per-rank table, the biggest cost, stragglers."""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.table import Table

from ..analysis import Analysis
from .summary import mean_shares

MAX_RANK_ROWS = 16
SHOWN = (("dataloader_wait", "dataloader"), ("compute", "compute"), ("comm", "comm"),
         ("comm_exposed", "exposed"), ("comm_sync_wait", "sync wait"), ("memcpy", "memcpy"),
         ("host_idle", "host idle"), ("other", "other"), ("gpu_busy", "GPU busy"))


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def _ms(us: float | None) -> str:
    return "–" if us is None else f"{us / 1000:.2f}"


def _shown_ranks(a: Analysis) -> tuple[list, str | None]:
    s = a.summaries
    if len(s) <= MAX_RANK_ROWS:
        return s, None
    by_time = sorted(s, key=lambda x: float(np.mean(x.values["step_time"])))
    keep = {id(by_time[0]), id(by_time[len(by_time) // 2]), id(by_time[-1])}
    strag = {st.rank for st in a.cross.stragglers[:5]}
    chosen = [x for x in s if id(x) in keep or x.rank in strag]
    return chosen, f"showing {len(chosen)} of {len(s)} ranks (fastest, median, slowest, stragglers); --json has all"


def _console() -> Console:
    con = Console(highlight=False)
    if not con.is_terminal:          # files and pipes: plain text, wide enough for the table
        con = Console(highlight=False, width=160, no_color=True)
    return con


def render(a: Analysis, console: Console | None = None, costs: list | None = None) -> None:
    con = console or _console()
    s0 = a.summaries[0]
    kinds = sorted({s.device_kind.upper() for s in a.summaries})
    backends = sorted({s.backend for s in a.summaries if s.backend})
    steps = sorted({len(s.steps) for s in a.summaries})
    con.print(f"[bold]ddpdoctor analyze[/bold] — {len(a.summaries)} rank(s)"
              + (f" of world size {a.discovery.world_size}" if a.discovery.world_size else "")
              + f", {'/'.join(map(str, steps))} step(s) per rank, {'/'.join(kinds)} trace"
              + (f" ({', '.join(backends)})" if backends else "")
              + f", steps from {s0.step_source}")
    for w in a.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}")
    rows, note = _shown_ranks(a)
    table = Table(title="Share of step time per rank", title_justify="left", show_edge=False)
    table.add_column("rank", justify="right")
    table.add_column("steps", justify="right")
    table.add_column("step ms", justify="right")
    for _, label in SHOWN:
        table.add_column(label, justify="right")
    for s in rows:
        share = a.rank_share(s)
        table.add_row(str(s.rank), str(len(s.steps)), _ms(float(np.mean(s.values["step_time"]))),
                      *[_pct(share[c]) for c, _ in SHOWN])
    con.print(table)
    if note:
        con.print(f"  ({note})")
    shares = mean_shares(a)
    if costs:
        # the diagnosis' ranked list of costs: the one list the verdict reads
        con.print("[bold]Costs, ranked:[/bold] " + "; ".join(
            f"{c.label} {_pct(c.cost)} [{c.rule}]" + ("" if c.material and c.eligible else " (not decisive)")
            for c in costs[:4]) + f"; compute {_pct(shares.get('compute'))}")
    cr = a.cross
    if cr.step_time_spread_us is not None:
        con.print(f"[bold]Across ranks:[/bold] step-time spread {_ms(cr.step_time_spread_us)} ms "
                  f"({_pct(cr.step_time_spread_share)} of the median step); imbalance score "
                  f"{'–' if cr.imbalance_score is None else f'{cr.imbalance_score:.2f}'} (0 = balanced); "
                  f"{cr.matched_collectives} collectives matched")
    if any(v > 0 for v in cr.arrival_late_us.values()):
        late = sorted(((r, v) for r, v in cr.arrival_late_us.items() if v > 0), key=lambda kv: -kv[1])[:5]
        con.print("Late arrival at the step's collectives, weighted by the wait each causes (vs the median of the "
                  "other ranks): "
                  + ", ".join(f"rank {r} {v / 1000:+.2f} ms" for r, v in late))
    if cr.stragglers:
        for st in cr.stragglers[:5]:
            con.print(f"[bold red]Straggler:[/bold red] rank {st.rank} reaches the step's collectives "
                      f"{st.late_us / 1000:.2f} ms after the median of the other ranks ({_pct(st.late_share)} of a step; "
                      f"last to arrive in {st.steps_late} of {st.steps} step(s))")
    elif cr.arrival_late_us:
        con.print("No straggler: no rank arrives late beyond the thresholds in rules/metrics.toml")
    if len(set(cr.input_shapes_by_rank.values())) > 1:
        con.print("Input shapes by rank: " + "; ".join(f"rank {r} {x}" for r, x in sorted(cr.input_shapes_by_rank.items())))
    for n in sorted({n for s in a.summaries for n in s.notes} | set(cr.notes)):
        con.print(f"[dim]note: {n}[/dim]")
    if a.hta:
        _render_hta(con, a.hta, a)


def _render_hta(con: Console, hta: dict, a: Analysis) -> None:
    if hta.get("error"):
        con.print(f"[dim]HTA cross-check unavailable: {hta['error']}[/dim]")
        return
    for s in a.summaries[:2]:
        h = hta.get("ranks", {}).get(s.rank)
        if not h:
            continue
        ours = a.rank_share(s)
        comm = ours.get("comm") or 0.0
        overlap = (comm - (ours.get("comm_exposed") or 0.0)) / comm if comm else None
        con.print(f"[dim]HTA cross-check, rank {s.rank} (HTA over the whole trace / ours over steps): "
                  f"compute {_pct(h.get('compute_share'))} / {_pct(ours.get('compute'))}, "
                  f"GPU idle {_pct(h.get('idle_share'))} / {_pct(1 - (ours.get('gpu_busy') or 0.0))}, "
                  f"comm overlapped by compute {_pct(h.get('comm_comp_overlap'))} / {_pct(overlap)}; "
                  f"HTA idle causes: host wait {_pct(h.get('idle_host_wait'))}, "
                  f"kernel wait {_pct(h.get('idle_kernel_wait'))}[/dim]")
