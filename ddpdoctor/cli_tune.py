"""The `ddpdoctor tune` click command (registered in ddpdoctor/cli.py): the measured path to a faster job."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from .errors import InputError


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    short_help="Try the diagnosis's settings one by one, keep what is measurably faster.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder for tune.json and every trial (default: ddpdoctor-tune-YYYYmmdd-HHMMSS).",
)
@click.option("--force", is_flag=True, help="Replace an earlier tune folder (one holding tune.json).")
@click.option(
    "--budget",
    "budget",
    type=click.FloatRange(min=0.5),
    default=30.0,
    show_default=True,
    metavar="MINUTES",
    help="Wall time for the whole tune; a trial that cannot finish in it is not started.",
)
@click.option(
    "--max-trials",
    type=click.IntRange(1, 50),
    default=6,
    show_default=True,
    help="Trials at most (each: the current best against the best plus one change).",
)
@click.option(
    "--allow-numerics",
    is_flag=True,
    help="Keep a faster setting that changes numerics (a gradient compression hook); without it such a "
    "setting is measured and listed, never kept.",
)
@click.option(
    "--repeat",
    type=click.IntRange(1, 20),
    default=None,
    help="Runs per arm of each trial (default: 2, more when step times vary).",
)
@click.option(
    "--warmup",
    type=click.IntRange(0),
    default=5,
    show_default=True,
    help="Training steps to let pass before recording, in every run.",
)
@click.option(
    "--active", type=click.IntRange(1), default=5, show_default=True, help="Training steps to record in every run."
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def tune(out, force, budget, max_trials, allow_numerics, repeat, warmup, active, command):
    """Capture and diagnose COMMAND, then try each setting its fixes name (ordered by predicted gain)
    against the current best, keep a change only when its 95 % interval lies above 1, re-diagnose after
    each kept change; writes OUT/tune.json.

    \b
      ddpdoctor tune -- torchrun --nproc_per_node=8 train.py
      ddpdoctor tune --budget 20 --max-trials 3 --out tune1 -- torchrun … train.py

    Exits 0 when done (whether or not a setting helped), 2 on bad input, the job's exit code when it fails
    without any change, 130 after Ctrl-C (tune.json keeps what was measured).
    """
    from .trial import tune_report
    from .trial.folders import prepare_output_folder
    from .trial.tune import TuneOptions, run_tune

    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InputError("no command to tune: ddpdoctor tune [OPTIONS] -- torchrun --nproc_per_node=N train.py ARGS")
    if command[0].startswith("-"):
        raise InputError(f"unknown option {command[0]!r} for tune (options go before `--`; see ddpdoctor tune --help)")
    from .capture.host.launcher import check_command

    check_command(command)
    target = Path(out) if out else Path(time.strftime("ddpdoctor-tune-%Y%m%d-%H%M%S"))
    prepare_output_folder(target, force, "tune.json", "tune folder")
    opts = TuneOptions(
        command=command,
        out=target.absolute(),
        budget_s=budget * 60,
        max_trials=max_trials,
        allow_numerics=allow_numerics,
        repeat=repeat,
        warmup=warmup,
        active=active,
    )
    t0 = time.monotonic()
    path = opts.out / "tune.json"

    def save(st, base_report, best_report):
        tune_report.write(path, tune_report.document(opts, st, base_report, best_report, time.monotonic() - t0))

    st, base_report, best_report = run_tune(
        opts, say=lambda m: click.echo(m, err=True), emit=lambda m: click.echo(f"ddpdoctor: {m}"), write=save
    )
    save(st, base_report, best_report)
    doc = tune_report.document(opts, st, base_report, best_report, time.monotonic() - t0)
    click.echo(f"ddpdoctor: stopped: {st.stopped}", err=True)
    for shown in doc["faster_but_changes_numerics"]:
        click.echo(f"ddpdoctor: {shown}: faster, changes numerics: opt in with --allow-numerics")
    click.echo(f"ddpdoctor: tune {path}", err=True)
    if st.exit_code == 2:
        raise InputError(st.stopped)
    if st.exit_code == 0 or st.trials:
        click.echo(f"ddpdoctor: {tune_report.final_line(doc)}")
    sys.exit(st.exit_code)
