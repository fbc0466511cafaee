"""The `ddpdoctor run` click command (registered in ddpdoctor/cli/commands.py): the top layer over the capture
(capture/host/launcher.py), a trial of changes (trial/runner.py) and the analysis of the bundle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from ..errors import InputError
from ..text import plural
from .options import (
    analysis_args,
    json_option,
    quiet_option,
    report_option,
    verbose_option,
    with_analysis_options,
)


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    short_help="Run a training command, profile a few steps on every rank, analyze.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False),
    default=None,
    help="Bundle folder (default: ddpdoctor-out-YYYYmmdd-HHMMSS; with --try ddpdoctor-trial-YYYYmmdd-HHMMSS). "
    "Never overwritten without --force.",
)
@click.option("--force", is_flag=True, help="Replace an existing bundle folder (and --json file).")
@click.option(
    "--warmup",
    type=click.IntRange(0),
    default=5,
    show_default=True,
    help="Training steps to let pass before recording.",
)
@click.option(
    "--active",
    type=click.IntRange(1),
    default=5,
    show_default=True,
    help="Training steps to record with torch.profiler.",
)
@click.option(
    "--min-window",
    "min_window",
    type=click.FloatRange(0),
    default=0.5,
    show_default=True,
    help="Record at least this many seconds: fast steps get more than --active steps (at most 200), the "
    "same number on every rank; 0 records exactly --active steps.",
)
@click.option(
    "--steady-within",
    "steady_within",
    type=click.IntRange(0),
    default=None,
    help="Past --warmup, wait at most this many steps for the DataLoader's prefetched batches to be used up "
    "before recording (default 200); 0 records from --warmup on.",
)
@click.option("--keep-going", is_flag=True, help="Do not stop training after the recorded window.")
@click.option(
    "--watch",
    is_flag=True,
    help="Record no window at start-up: let the job run to its end, watch every step on every rank, and record "
    "an incident (a profiled window, or every rank's stacks for a hang) when steps slow down or stop. "
    "Writes OUT/watch.json and OUT/incidents/.",
)
@click.option("--no-analyze", is_flag=True, help="Only capture; do not analyze the bundle afterwards.")
@report_option
@json_option
@with_analysis_options
@verbose_option
@quiet_option
@click.option(
    "--try",
    "tries",
    multiple=True,
    metavar="KEY=VALUE|RULE",
    help="Run the job with and without this change and measure it (repeatable), e.g. "
    "--try dataloader.num_workers=4, --try ddp.bucket_cap_mb=100, --try env.NCCL_P2P_DISABLE=1, "
    "--try RULE (a finding's rule id: its first fix). Writes OUT/trial.json.",
)
@click.option(
    "--repeat",
    type=click.IntRange(1, 20),
    default=None,
    help="With --try: runs per arm (default: 2, more when step times vary).",
)
@click.option(
    "--baseline",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="With --try: use this existing bundle of the same command as the baseline.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(
    ctx,
    out,
    force,
    warmup,
    active,
    min_window,
    steady_within,
    keep_going,
    watch,
    no_analyze,
    report_dir,
    json_path,
    hta,
    rules_dirs,
    sets,
    no_config,
    verbose,
    quiet,
    tries,
    repeat,
    baseline,
    command,
):
    """Run COMMAND (torchrun …, python -m torch.distributed.run …, python train.py …)
    unchanged, profile a few steps on every rank, collect a bundle, then analyze it.

    \b
      ddpdoctor run -- torchrun --nproc_per_node=8 train.py --lr 0.1
      ddpdoctor run --out node0 -- torchrun --nnodes=2 --node_rank=0 … train.py

    Exits with the training's exit code (130 after Ctrl-C, 143 after SIGTERM).
    """
    from ..capture.host.launcher import RunOptions, run_capture

    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InputError("no command to run: ddpdoctor run [OPTIONS] -- torchrun --nproc_per_node=N train.py ARGS")
    if watch and tries:
        raise InputError("--watch and --try do not go together: a trial records a window in each arm")
    if tries and (report_dir or json_path):
        raise InputError(
            "--report and --json belong to the analysis of one run; analyze "
            "a trial's arm afterwards: ddpdoctor analyze TRIAL_FOLDER --report DIR"
        )
    ruleset = None
    if not no_analyze or tries:  # a bad rule folder or --set fails now, not after the training
        from ..metrics import hta_adapter
        from .options import ruleset_in_force

        hta_adapter.require(hta)
        ruleset = ruleset_in_force(rules_dirs, sets, no_config)
    analysis = analysis_args(rules_dirs, sets, no_config, hta, quiet, json_path, report_dir, verbose, force)
    if tries:
        from ..analysis import AnalyzeOptions

        arm_analysis = (ruleset, AnalyzeOptions(hta=hta))  # every arm is diagnosed with the rules in force
        trial_args = (command, out, force, warmup, active, keep_going, tries, repeat, baseline, arm_analysis, quiet)
        _trial(*trial_args, steady_within=steady_within)
        return
    if repeat is not None or baseline is not None:
        raise InputError("--repeat and --baseline belong to --try (a trial of one change)")
    from .options import refuse_overwrite

    refuse_overwrite(json_path, force, "--json")  # before the job runs, not after it
    if report_dir:
        from ..report.files import check_report_dir

        check_report_dir(report_dir, force)
    opts = RunOptions(
        command=command,
        out=Path(out) if out else None,
        force=force,
        warmup=warmup,
        active=active,
        min_window_s=min_window,
        keep_going=keep_going,
        steady_within=steady_within,
        watch=watch,
    )
    if watch:
        opts.keep_going = True
    result = run_capture(opts)
    if watch:
        _watch_summary(result, no_analyze, quiet)
        sys.exit(result.exit_code)
    m = result.manifest
    ranks = m.get("ranks_present") or []
    settings = list(_rank_settings(result.out))
    # (a process that died after its program ended left a whole run: its note is said, the card is not a failure's)
    ended_badly = result.exit_code != 0 and not m.get("interrupted_by") and not m.get("died_after_program_end")
    if not quiet and (no_analyze or not ended_badly or verbose):  # a failed run: the card below says it all
        _say_what_happened(result, settings)
    if not quiet:
        click.echo(_bundle_line(result), err=True)
    if not no_analyze:  # last, so the card and its Next: line end the output
        if not quiet:
            click.echo("", err=True)
        _analyze(
            result.out,
            bool(ranks),
            settings,
            opts.warmup,
            analysis,
            failed=ended_badly,
            quiet=quiet,
            interrupted=m.get("interrupted_by"),
        )
    sys.exit(result.exit_code)


def _say_what_happened(result, settings) -> None:
    """The ranks' problems in time order, why a rank has no trace, the window's end: for a run that did
    not fail, or when no card follows (--no-analyze)."""
    import shutil

    from ..run_timeline import failure_timeline
    from ..text import wrap

    m = result.manifest
    timeline = failure_timeline([str(result.out)], interrupted_by=m.get("interrupted_by"))
    if timeline:
        click.echo("ddpdoctor: problems seen by the ranks, in order (the first is the likely cause):", err=True)
        width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 120))
        for line in timeline:  # wrapped at words, never cut: the first line is the likely cause
            for part in wrap(line, width, "  ", " " * 12):
                click.echo(part, err=True)
    if any(((s or {}).get("exit") or {}).get("reason") == "window complete" for s in settings):
        click.echo(
            "ddpdoctor: training was stopped after the recorded window (use --keep-going to let it run on)", err=True
        )
    if any((s or {}).get("user_profiler") for s in settings):
        click.echo(
            "ddpdoctor: the script runs its own torch.profiler, so ddpdoctor did not record (two profilers "
            "cannot run at once); analyze the script's traces with `ddpdoctor analyze TRACE_DIR`",
            err=True,
        )
    for note in m.get("notes") or []:
        click.echo(f"ddpdoctor: {note}", err=True)


def _bundle_line(result) -> str:
    """One line: the bundle, how the run ended, where torchrun's own output went."""
    m = result.manifest
    ranks, world = m.get("ranks_present") or [], m.get("world_size")
    if m.get("interrupted_by"):
        steps = [v for v in (m.get("steps_completed") or {}).values() if isinstance(v, int)]
        at = f" at step {max(steps)}" if steps and max(steps) > 0 else " before the first step"
        how = (
            f"interrupted by you (Ctrl-C){at}"
            if m["interrupted_by"] == "SIGINT"
            else f"stopped by {m['interrupted_by']}{at}"
        )
        ended = f"{how}, exit code {result.exit_code}"
    else:
        ended = f"status {result.status}, exit code {result.exit_code}"
    traces = (
        f"traces from {len(ranks)} of {plural(world, 'rank')}" if world else f"traces from {plural(len(ranks), 'rank')}"
    )
    log = result.out / "launcher.log"
    try:
        pointer = "; the launcher's own output is in launcher.log" if log.stat().st_size else ""
    except OSError:
        pointer = ""
    return f"ddpdoctor: bundle {result.out} — {ended}, {traces}{pointer}"


_RULE_ID = r"[A-Z]{2,4}\d{3}"  # as rules_engine.model.ID_PATTERN: a prefix of two to four letters


def _trial(
    command, out, force, warmup, active, keep_going, tries, repeat, baseline, arm_analysis, quiet, steady_within=None
) -> None:
    import re

    from ..capture.agent.overrides import OverrideError, parse_changes
    from ..trial.folders import prepare_output_folder
    from ..trial.runner import TrialOptions, run_trial, summary_line
    from .options import default_folder

    if keep_going:
        raise InputError("--keep-going cannot be used with --try: both arms must record the same window")
    rules = [t for t in tries if re.fullmatch(_RULE_ID, t.strip())]
    if rules and len(tries) > 1:
        raise InputError("--try RULE takes that finding's first fix on its own; give it alone")
    try:
        changes = None if rules else parse_changes(list(tries))
    except OverrideError as exc:
        raise InputError(str(exc)) from None
    target = Path(out) if out else default_folder("trial")
    prepare_output_folder(target, force, "trial.json", "trial")
    t = run_trial(
        TrialOptions(
            command=command,
            out=target,
            changes=changes,
            rule=rules[0] if rules else None,
            repeat=repeat,
            baseline=Path(baseline) if baseline else None,
            warmup=warmup,
            active=active,
            steady_within=steady_within,
            force=force,
            ruleset=arm_analysis[0],
            analyze_opts=arm_analysis[1],
        ),
        say=(lambda m: None) if quiet else (lambda m: click.echo(m, err=True)),
    )
    if not quiet:
        click.echo(f"ddpdoctor: {summary_line(t)}")
        for key, why in ((t.get("applied") or {}).get("skipped") or {}).items():
            click.echo(f"ddpdoctor: not applied: {key}: {why}", err=True)
        click.echo(f"ddpdoctor: trial {target / 'trial.json'}", err=True)
    failed = next((a for a in t["arms"] if a["arm"] == t.get("failed_arm") and a["exit_code"]), None)
    sys.exit(failed["exit_code"] if failed else 0)


def _waiting_for_loader(settings: list) -> str | None:
    """Training ended while the window waited for the loader's prefetched batches (issue 37), in words."""
    for s in settings:
        st = ((s or {}).get("window") or {}).get("steady") or {}
        if st.get("decided_by") == "waiting":
            return (
                f"training ended after {plural(s.get('steps_completed') or 0, 'step')} while the window waited "
                f"for the loader's {st.get('prefetched_batches')} prefetched batches to be used up "
                f"({st.get('returned_batches')} returned); run the job longer, or record from --warmup on "
                f"with --steady-within 0"
            )
    return None


def _analyze(
    out: Path,
    have_traces: bool,
    settings: list,
    warmup: int,
    analysis: list[str],
    failed=False,
    quiet=False,
    interrupted: str | None = None,
) -> None:
    if not have_traces:
        from ..capture.host.manifest import NEVER_JOINED, never_joined

        steps = [s.get("steps_completed") for s in settings if s and s.get("steps_completed") is not None]
        if never_joined({i: s for i, s in enumerate(settings) if s}):
            why = NEVER_JOINED
        elif settings and not any(steps):
            why = "no training step was seen (no torch.optim optimizer step and no DDP forward)"
        elif steps and max(steps) <= warmup and interrupted:  # the user stopped it: no --warmup advice
            how = "you stopped it (Ctrl-C)" if interrupted == "SIGINT" else f"it was stopped by {interrupted}"
            why = f"{how} after {plural(max(steps), 'step')}, before the window (--warmup {warmup})"
        elif waited := _waiting_for_loader(settings):
            why = waited
        elif steps and max(steps) <= warmup:
            why = (
                f"training ended after {plural(max(steps), 'step')}, before the window (--warmup {warmup}); "
                f"use a smaller --warmup"
            )
        else:
            why = "no rank recorded a trace"
        if not failed:  # (a failed run: its card says so, from the logs)
            if quiet:
                return
            click.echo(
                f"ddpdoctor: no trace was recorded: {why}; see the bundle's launcher.log and "
                f"ranks/*/output.log, events.jsonl",
                err=True,
            )
            return
    try:
        from ..errors import FAILED_RUN

        res = subprocess.run([sys.executable, "-m", "ddpdoctor", "analyze", str(out), *analysis], timeout=1800)
        if res.returncode not in (0, FAILED_RUN):
            click.echo(
                f"ddpdoctor: analysis of {out} failed (exit {res.returncode}); "
                f"the bundle is kept: ddpdoctor analyze {out}",
                err=True,
            )
    except (OSError, subprocess.SubprocessError) as exc:
        click.echo(f"ddpdoctor: analysis of {out} failed ({exc}); the bundle is kept", err=True)


def _rank_settings(out: Path):
    from ..capture.host.manifest import read_rank_settings

    return read_rank_settings(out).values()


def _watch_summary(result, no_analyze: bool, quiet: bool) -> None:
    """`run --watch`: the run's watch.json and, unless --no-analyze, the one-screen summary."""
    from ..capture.agent.watch_incident import write_summary

    try:
        write_summary(str(result.out))  # the ranks wrote it as they ended; again here, with every rank's state
    except OSError as exc:
        click.echo(f"ddpdoctor: could not write {result.out / 'watch.json'}: {exc}", err=True)
        return
    if quiet:
        return
    click.echo(f"ddpdoctor: watched run in {result.out}, exit code {result.exit_code}", err=True)
    if not no_analyze:
        from ..watch_summary import render_watch

        click.echo(render_watch(result.out))
