"""The `ddpdoctor run` click command (registered in ddpdoctor/cli.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from ..errors import InputError


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
               short_help="Run a training command, profile a few steps on every rank, analyze.")
@click.option("--out", "out", type=click.Path(file_okay=False), default=None,
              help="Bundle folder (default: ddpdoctor-out-YYYYmmdd-HHMMSS). Never overwritten without --force.")
@click.option("--force", is_flag=True, help="Replace an existing bundle folder.")
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True,
              help="Training steps to let pass before recording.")
@click.option("--active", type=click.IntRange(1), default=5, show_default=True,
              help="Training steps to record with torch.profiler.")
@click.option("--keep-going", is_flag=True, help="Do not stop training after the recorded window.")
@click.option("--no-analyze", is_flag=True, help="Only capture; do not analyze the bundle afterwards.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(ctx, out, force, warmup, active, keep_going, no_analyze, command):
    """Run COMMAND (torchrun …, python -m torch.distributed.run …, python train.py …)
    unchanged, profile a few steps on every rank, collect a bundle, then analyze it.

    \b
      ddpdoctor run -- torchrun --nproc_per_node=8 train.py --lr 0.1
      ddpdoctor run --out node0 -- torchrun --nnodes=2 --node_rank=0 … train.py

    Exits with the training's exit code.
    """
    from .launcher import RunOptions, run_capture

    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InputError("no command to run: ddpdoctor run [OPTIONS] -- torchrun --nproc_per_node=N train.py ARGS")
    opts = RunOptions(command=command, out=Path(out) if out else None, force=force, warmup=warmup,
                      active=active, keep_going=keep_going)
    result = run_capture(opts)
    m = result.manifest
    ranks = m.get("ranks_present") or []
    settings = list(_rank_settings(result.out))
    if not no_analyze:
        _analyze(result.out, bool(ranks), settings, opts.warmup)
    from .summary import failure_timeline

    timeline = failure_timeline([str(result.out)])
    if timeline:
        click.echo("ddpdoctor: problems seen by the ranks, in order (the first is the likely cause):", err=True)
        for line in timeline:
            click.echo(f"  {line}", err=True)
    if any(((s or {}).get("exit") or {}).get("reason") == "window complete" for s in settings):
        click.echo("ddpdoctor: training was stopped after the recorded window (use --keep-going to let it run on)",
                   err=True)
    if any((s or {}).get("user_profiler") for s in settings):
        click.echo("ddpdoctor: the script runs its own torch.profiler, so ddpdoctor did not record (two profilers "
                   "cannot run at once); analyze the script's traces with `ddpdoctor analyze TRACE_DIR`", err=True)
    for note in m.get("notes") or []:
        click.echo(f"ddpdoctor: {note}", err=True)
    click.echo(f"ddpdoctor: bundle {result.out} — status {result.status}, exit code {result.exit_code}, "
               f"traces from {len(ranks)} of {m.get('world_size') or '?'} rank(s)", err=True)
    sys.exit(result.exit_code)


def _analyze(out: Path, have_traces: bool, settings: list, warmup: int) -> None:
    if not have_traces:
        steps = [s.get("steps_completed") for s in settings if s and s.get("steps_completed") is not None]
        if settings and not any(steps):
            why = "no training step was seen (no torch.optim optimizer step and no DDP forward)"
        elif steps and max(steps) <= warmup:
            why = (f"training ended after {max(steps)} step(s), before the window (--warmup {warmup}); "
                   f"use a smaller --warmup")
        else:
            why = "no rank recorded a trace"
        click.echo(f"ddpdoctor: no trace was recorded: {why}; see the bundle's launcher.log and "
                   f"ranks/*/output.log, events.jsonl", err=True)
        return
    try:
        res = subprocess.run([sys.executable, "-m", "ddpdoctor", "analyze", str(out)], timeout=1800)
        if res.returncode != 0:
            click.echo(f"ddpdoctor: analysis of {out} failed (exit {res.returncode}); "
                       f"the bundle is kept: ddpdoctor analyze {out}", err=True)
    except (OSError, subprocess.SubprocessError) as exc:
        click.echo(f"ddpdoctor: analysis of {out} failed ({exc}); the bundle is kept", err=True)


def _rank_settings(out: Path):
    from .launcher import read_rank_settings

    return read_rank_settings(out).values()
