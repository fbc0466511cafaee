"""The `ddpdoctor tune` click command (registered in ddpdoctor/cli/commands.py): the measured path to a faster job."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from ..errors import InputError
from .options import (
    analysis_args,
    default_folder,
    json_option,
    quiet_option,
    report_option,
    ruleset_in_force,
    verbose_option,
    with_analysis_options,
)


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
@click.option(
    "--force",
    is_flag=True,
    help="Replace an earlier tune folder (one holding tune.json), the --report folder and the --json file.",
)
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
@click.option(
    "--steady-within",
    "steady_within",
    type=click.IntRange(0),
    default=None,
    help="Past --warmup, wait at most this many steps for the DataLoader's prefetched batches to be used up "
    "before recording, in every run (default 200); 0 records from --warmup on.",
)
@report_option
@json_option
@with_analysis_options
@verbose_option
@quiet_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def tune(
    out,
    force,
    budget,
    max_trials,
    allow_numerics,
    repeat,
    warmup,
    active,
    steady_within,
    report_dir,
    json_path,
    hta,
    rules_dirs,
    sets,
    no_config,
    verbose,
    quiet,
    command,
):
    """Capture and diagnose COMMAND, then try each setting its fixes name (ordered by predicted gain)
    against the current best, keep a change only when its 95 % interval lies above 1, re-diagnose after
    each kept change; writes OUT/tune.json.

    \b
      ddpdoctor tune -- torchrun --nproc_per_node=8 train.py
      ddpdoctor tune --budget 20 --max-trials 3 --out tune1 -- torchrun … train.py

    Every run is diagnosed with the rules in force (--rules, --set, --no-config, --hta); --report, --json
    and -v give the diagnosis of the final settings' run, as `ddpdoctor analyze` would.

    Exits 0 when done (whether or not a setting helped), 2 on bad input, the job's exit code when it fails
    without any change, 130 after Ctrl-C (tune.json keeps what was measured).
    """
    from ..trial import tune_report
    from ..trial.folders import prepare_output_folder
    from ..trial.tune import TuneOptions, run_tune

    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InputError("no command to tune: ddpdoctor tune [OPTIONS] -- torchrun --nproc_per_node=N train.py ARGS")
    if command[0].startswith("-"):
        raise InputError(f"unknown option {command[0]!r} for tune (options go before `--`; see ddpdoctor tune --help)")
    from ..capture.host.launcher import check_command

    check_command(command)
    from ..analysis import AnalyzeOptions
    from ..metrics import hta_adapter

    hta_adapter.require(hta)  # a bad --hta, rule folder or --set fails now, not after the first run
    ruleset = ruleset_in_force(rules_dirs, sets, no_config)
    from .options import refuse_overwrite

    refuse_overwrite(json_path, force, "--json")  # before the first run, not after the last
    if report_dir:
        from ..report.files import check_report_dir

        check_report_dir(report_dir, force)
    target = Path(out) if out else default_folder("tune")
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
        steady_within=steady_within,
        ruleset=ruleset,
        analyze_opts=AnalyzeOptions(hta=hta),
    )
    t0 = time.monotonic()
    path = opts.out / "tune.json"

    def save(st, base_report, best_report):
        tune_report.write(path, tune_report.document(opts, st, base_report, best_report, time.monotonic() - t0))

    def echo(message: str, err: bool = False) -> None:
        if not quiet:
            click.echo(message, err=err)

    st, base_report, best_report = run_tune(
        opts, say=lambda m: echo(m, err=True), emit=lambda m: echo(f"ddpdoctor: {m}"), write=save
    )
    save(st, base_report, best_report)
    doc = tune_report.document(opts, st, base_report, best_report, time.monotonic() - t0)
    echo(f"ddpdoctor: stopped: {st.stopped}", err=True)
    for shown in doc["faster_but_changes_numerics"]:
        echo(f"ddpdoctor: {shown}: faster, changes numerics: opt in with --allow-numerics")
    echo(f"ddpdoctor: tune {path}", err=True)
    if st.exit_code == 2:
        raise InputError(st.stopped)
    if st.exit_code == 0 or st.trials:
        echo(f"ddpdoctor: {tune_report.final_line(doc)}")
    if (report_dir or json_path or verbose) and best_report is not None and st.best_bundle:
        shown = verbose and not quiet  # the full view; else the files only, written quietly
        args = analysis_args(rules_dirs, sets, no_config, hta, not shown, json_path, report_dir, shown, force)
        _analyze_final(st.best_bundle, args, quiet)
        for written in ([f"JSON written to {json_path}"] if json_path else []) + (
            [f"Report written to {report_dir}/ (report.md, report.html, report.json, plots/)"] if report_dir else []
        ):
            echo(f"ddpdoctor: {written} (the final settings' run)")
    sys.exit(st.exit_code)


def _analyze_final(bundle: str, args: list[str], quiet: bool) -> None:
    """The final settings' diagnosis (--report, --json, -v), by `ddpdoctor analyze`, as `run` does."""
    import subprocess

    from ..errors import FAILED_RUN

    if not quiet:
        click.echo(f"ddpdoctor: the final settings' run: ddpdoctor analyze {bundle}", err=True)
    try:
        res = subprocess.run([sys.executable, "-m", "ddpdoctor", "analyze", bundle, *args], timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        raise InputError(f"analysis of {bundle} failed ({exc}); the bundle is kept") from None
    if res.returncode not in (0, FAILED_RUN):  # analyze said why, in one line on stderr
        sys.exit(res.returncode)
