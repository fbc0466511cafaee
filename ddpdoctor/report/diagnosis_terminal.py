"""Terminal output of a diagnosis: the verdict in one line, failures, findings with their
fixes, abstentions; then the per-rank breakdown (report/terminal.py)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from . import terminal

PERFORMANCE = ("dataloader", "communication", "compute", "imbalance", "config")
CATEGORY_STYLE = {"failure": "bold red", "network": "red", "dataloader": "yellow", "communication": "magenta",
                  "imbalance": "cyan", "compute": "green", "config": "blue", "memory": "red", "info": "dim"}


def _speedup(f) -> str:
    if f.expected_speedup is None or f.cost is None:
        return ""
    return f" — costs {100 * f.cost:.0f} % of the step: up to {f.expected_speedup:.2f}x faster if removed"


def render_report(report, console: Console | None = None, show_table: bool = True) -> None:
    con = console or terminal._console()
    d = report.diagnosis
    v = d.verdict
    head = "[bold]Verdict:[/bold] "
    perf = ""
    if v.bottleneck:
        conf = f" (confidence {v.confidence_label}, {v.confidence:.2f})" if v.confidence is not None else ""
        perf = f"[bold]{escape(v.label or v.bottleneck + '-bound')}[/bold]{conf}"
    if v.failed:
        first = next((f for f in d.findings if f.category in ("failure", "network", "memory")), None)
        head += "[bold red]the run failed[/bold red]" + (f": {escape(first.title)}" if first else "")
        head += f" (recorded steps: {perf})" if perf else ""
    else:
        head += perf or "[bold]no performance verdict[/bold]"
    con.print(head)
    con.print(f"  {escape(v.summary.split(': ', 1)[1] if v.label and v.summary.startswith(v.label + ': ') else v.summary)}")
    if report.analysis is None:
        con.print("[yellow]  performance not assessed: no profiler traces, logs only[/yellow]")
    elif report.partial:
        con.print("[yellow]  partial result: some ranks, steps or files are missing (see warnings)[/yellow]")
    for w in report.warnings:
        con.print(f"[yellow]warning:[/yellow] {escape(w)}")
    for i, f in enumerate(d.findings, 1):
        style = CATEGORY_STYLE.get(f.category, "")
        ranks = f" (rank{'s' if len(f.ranks) > 1 else ''} {', '.join(map(str, f.ranks))})" if f.ranks else ""
        con.print(f"\n[{style}]{i}. [{escape(f.rule)}] {escape(f.title)}[/{style}]{escape(ranks)}"
                  f"[dim]{escape(_speedup(f))}[/dim]")
        con.print(f"   {escape(f.summary)}")
        for fx in f.fixes:
            con.print(f"   [bold]fix:[/bold] {escape(fx.title)}")
            for line in fx.change.strip("\n").splitlines():
                con.print(f"      {escape(line)}", soft_wrap=True)
            if fx.not_recorded:
                con.print(f"      [dim](not recorded for this run: {escape(', '.join(fx.not_recorded))})[/dim]")
    abstained = d.abstained if report.analysis is not None else \
        [a for a in d.abstained if a["category"] not in PERFORMANCE]
    if abstained:
        cats: dict[str, list] = {}
        for a in abstained:
            cats.setdefault(a["category"], []).append(a)
        con.print("\n[dim]Not assessed (missing evidence): " + "; ".join(
            f"{escape(c)} ({', '.join(escape(a['rule']) for a in lst)}: needs "
            f"{escape(', '.join(sorted({m for a in lst for m in a['missing']})))})" for c, lst in sorted(cats.items()))
            + "[/dim]")
    for line in d.not_assessed:
        con.print(f"[dim]Not assessed — {escape(line)}[/dim]")
    for e in d.errors:
        con.print(f"[red]rule error:[/red] {escape(e)}")
    if show_table and report.analysis is not None:
        con.print()
        terminal.render(report.analysis, con, costs=d.costs)
