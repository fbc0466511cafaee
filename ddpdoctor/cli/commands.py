"""Command-line interface (click wiring only): the group, analyze, report, schema, bundle and compare; the
`rules`, `run` and `tune` commands are registered from their modules at the end."""

from __future__ import annotations

import json
import os
import sys
import traceback

import click

from ..errors import FAILED_RUN, InputError, as_input_error
from ..text import plural
from ..version import __version__
from .options import (
    force_file_option,
    format_option,
    hta_option_ignored,
    json_option,
    output_width,
    quiet_option,
    refuse_overwrite,
    report_option,
    ruleset_in_force,
    verbose_option,
    with_analysis_options,
    with_rules_options,
)


def _fail(message: str, code: int) -> None:
    if os.environ.get("DDPDOCTOR_DEBUG") and sys.exc_info()[0] is not None:
        traceback.print_exc()
    message = " ".join(str(message).split("\n"))  # always one line
    click.echo(f"ddpdoctor: error: {message}", err=True)
    sys.exit(code)


class _Group(click.Group):
    """Turns user errors into one line and exit code 2, and never shows a traceback
    unless DDPDOCTOR_DEBUG is set."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as exc:
            _fail(str(exc), exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except BrokenPipeError:  # `ddpdoctor analyze … | head`: the reader left, not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            translated = as_input_error(exc)  # bad input met deep in a decoder (the API's translation too)
            if translated is not None:
                _fail(str(translated), translated.exit_code)
            _fail(f"internal error: {type(exc).__name__}: {exc} (set DDPDOCTOR_DEBUG=1 for details)", 1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="ddpdoctor")
def main() -> None:
    """Why is my PyTorch DDP training slow, and what should I change?"""


_redact_hosts_option = click.option(
    "--redact-hosts",
    is_flag=True,
    help="Replace host names and IP addresses by placeholders (host-1, ip-1, …), the same host by the same "
    "placeholder in every output.",
)


def _progress(quiet: bool):
    """A progress display on stderr while ranks load, only when stderr is a terminal."""
    import contextlib

    if quiet or not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    prog = Progress(
        SpinnerColumn(),
        TextColumn("loading traces, ranks done: {task.completed}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )

    @contextlib.contextmanager
    def ctx():
        with prog:
            task = prog.add_task("load", total=None)
            yield lambda rank: prog.advance(task)

    return ctx()


def _write_text(path, text: str) -> None:
    from pathlib import Path

    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _print_terminal(d: dict, verbose: bool = False, report_dir: str | None = None) -> None:
    """The card (or with -v the full view) from the diagnosis document, which is already redacted."""
    from ..report.renderers import RenderOptions, terminal_lines

    tty = sys.stdout.isatty()
    for line in terminal_lines(d, RenderOptions(width=output_width(), verbose=verbose, report_dir=report_dir)):
        if tty and line.startswith(("Verdict:", "Fix first", "Next:")):
            head, sep, rest = line.partition(":")
            line = click.style(head + sep, bold=True) + rest
        click.echo(line)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@json_option
@report_option
@format_option(
    ["terminal", "md", "html", "json"],
    None,
    "Print the report in this format on stdout (and nothing else there); terminal is the card (the default).",
)
@click.option("--all-windows", is_flag=True, help="Use every profiling window of a rank, not only the latest one.")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1),
    default=None,
    help="Worker processes for decoding ranks in parallel (default: number of CPUs).",
)
@click.option(
    "--ranks",
    "ranks_spec",
    metavar="SPEC",
    default=None,
    help="Analyze only these ranks, e.g. 0-7,512,1020-1023 (the others are not read; every output says so).",
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    default=None,
    help="Decode ranks on this Dask distributed cluster, e.g. tcp://host:8786 (extra: ddpdoctor[dask]); "
    "PATHS must be readable from its workers (a shared filesystem or URLs).",
)
@click.option(
    "--comm-kernel",
    "comm_patterns",
    multiple=True,
    metavar="REGEX",
    help="Treat kernels whose name matches REGEX as communication (repeatable).",
)
@with_analysis_options
@_redact_hosts_option
@verbose_option
@quiet_option
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing --json file; write the --report folder even when it holds other files (an "
    "earlier report is always replaced).",
)
def analyze(
    paths,
    json_path,
    report_dir,
    fmt,
    all_windows,
    jobs,
    ranks_spec,
    scheduler,
    comm_patterns,
    hta,
    rules_dirs,
    sets,
    no_config,
    redact_hosts,
    verbose,
    quiet,
    force,
):
    """Diagnose a run: why is it slow or why did it fail, and what to change.

    PATHS are trace files (*.json, *.json.gz), log files, or folders searched
    recursively: a `ddpdoctor run` bundle, a tensorboard_trace_handler folder, traces
    and logs from a ticket. Traces may also be fsspec URLs (s3://bucket/run/, gs://…)
    when the store's package is installed (s3fs, gcsfs, …).
    """
    from ..watch_summary import render_watch, watch_folder_of

    if (watched := watch_folder_of(list(paths))) is not None and not (
        json_path or report_dir or fmt not in (None, "terminal")
    ):
        click.echo(render_watch(watched))  # a `run --watch` folder: the whole run in one screen (issue 38)
        return
    from ..analysis import AnalyzeOptions
    from ..api import check_patterns, diagnose
    from ..diagnosis import AnalysisContext
    from ..report.files import check_report_dir, write_report_dir
    from ..report.renderers import dumps_json, render

    refuse_overwrite(json_path, force, "--json")  # before the analysis: a refusal costs nothing
    if report_dir:
        check_report_dir(report_dir, force)
    check_patterns(comm_patterns, "--comm-kernel")
    context = AnalysisContext.of(ruleset_in_force(rules_dirs, sets, no_config))  # this analysis's own
    opts = AnalyzeOptions(
        all_windows=all_windows,
        jobs=jobs,
        comm_patterns=tuple(comm_patterns),
        hta=hta,
        scheduler=scheduler,
        ranks=ranks_spec,
    )
    d = diagnose(list(paths), opts, context, redact_hosts=redact_hosts, quiet=quiet, progress=lambda: _progress(quiet))
    if json_path:
        _write_text(json_path, dumps_json(d))
    if report_dir:
        write_report_dir(d, report_dir, force)
    if fmt and fmt != "terminal":
        sys.stdout.write(render(d, fmt))
    elif not quiet:
        _print_terminal(d, verbose, report_dir)
        if json_path:
            click.echo(f"JSON written to {json_path}")
        if report_dir:
            click.echo(f"Report written to {report_dir}/ (report.md, report.html, report.json, plots/)")
    _exit_for(d)


def _exit_for(d: dict) -> None:
    """A run that failed (the job's own failure, found in its logs or bundle) exits FAILED_RUN (3), distinct
    from bad input (2), so CI can tell them apart."""
    if (d.get("verdict") or {}).get("failed"):
        sys.exit(FAILED_RUN)


@main.command("report")
@click.argument("source", type=click.Path())
@format_option(
    ["terminal", "md", "html", "json"], "md", "The format to write; terminal is the card (-v: the full view)."
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, writable=True), help="Write to this file instead of stdout."
)
@verbose_option
@_redact_hosts_option
@force_file_option
def report_cmd(source, fmt, output, verbose, redact_hosts, force):
    """Re-render a diagnosis without the traces.

    SOURCE is a report.json (from `analyze --report` or `--json`), a report folder, or a
    bundle archive from `ddpdoctor bundle`.
    """
    from ..report.files import load_diagnosis, prepare
    from ..report.renderers import RenderOptions, render

    refuse_overwrite(output, force, "-o")
    d = prepare(load_diagnosis(source), redact_hosts)
    if fmt == "terminal" and not output:
        _print_terminal(d, verbose)
        return
    text = render(d, fmt, RenderOptions(verbose=verbose))
    if output:
        _write_text(output, text)
    else:
        sys.stdout.write(text)


@main.command()
def schema():
    """Print the JSON Schema of the diagnosis document (ddpdoctor.diagnosis/1)."""
    from ..report.document import json_schema

    click.echo(json.dumps(json_schema(), indent=1, sort_keys=True))


@main.command()
@click.argument("source", type=click.Path(exists=True))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, writable=True),
    help="The archive to write, e.g. ticket.tar.gz.",
)
@click.option(
    "--max-mb",
    type=click.FloatRange(min=0.1),
    default=25.0,
    show_default=True,
    help="Size budget of the archive (GitHub accepts attachments up to 25 MB).",
)
@click.option(
    "--with-traces/--no-traces",
    default=True,
    show_default=True,
    help="Include the trace files (as many as fit the budget).",
)
@click.option("--trim-traces", is_flag=True, help="Keep only the profiled steps' events of each trace.")
@with_analysis_options
@_redact_hosts_option
@quiet_option
@force_file_option
def bundle(
    source, output, max_mb, with_traces, trim_traces, hta, rules_dirs, sets, no_config, redact_hosts, quiet, force
):
    """Pack a run into one archive to attach to a bug ticket.

    SOURCE is a run folder (a `ddpdoctor run` bundle, traces, logs); it is analyzed
    unless it already holds a report.json.  The archive holds the report (md, html, json,
    plots), facts, manifest and host records, logs and (optionally trimmed) traces, with
    secrets redacted and files that look like secrets left out.
    """
    from pathlib import Path

    from ..analysis import AnalyzeOptions
    from ..api import analyzer
    from ..diagnosis import AnalysisContext
    from ..metrics import hta_adapter
    from ..report.files import load_diagnosis, prepare
    from ..report.redaction import HostRedactor
    from ..ticket.archive import build_bundle

    refuse_overwrite(output, force, "-o")  # before the analysis: a refusal costs nothing
    hta_adapter.require(hta)
    hosts = HostRedactor() if redact_hosts else None
    context = AnalysisContext.of(ruleset_in_force(rules_dirs, sets, no_config))
    with _progress(quiet) as progress:
        raw = load_diagnosis(source, analyzer(AnalyzeOptions(hta=hta), context, progress))
    if hosts is not None:
        from ..ticket.archive import bundle_files, hosts_from_records

        hosts_from_records(bundle_files(Path(source)), hosts)
    d = prepare(raw, redact_hosts, hosts, context.secrets)
    kept = dict(max_mb=max_mb, with_traces=with_traces, trim_traces=trim_traces, hosts=hosts, secrets=context.secrets)
    res = build_bundle(source, output, d, **kept)
    if not quiet:
        click.echo(f"{res.path}: {res.size / 1024 / 1024:.2f} MiB, {plural(len(res.members), 'file')}")
        for x in res.left_out:
            click.echo(f"  left out: {hosts.sub(x) if hosts else x}")


@main.command()
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path(), required=False)
@click.option(
    "--max-regression",
    type=float,
    default=None,
    metavar="PCT",
    help="Exit 1 when the median step time grew by more than PCT percent.",
)
@format_option(["terminal", "md", "json"], "terminal", "The format to print (text is accepted for terminal).")
@with_rules_options
@hta_option_ignored
@quiet_option
def compare(before, after, max_regression, fmt, hta, rules_dirs, sets, no_config, quiet):
    """Before/after: per-category step-time change, the verdict then and now.

    BEFORE and AFTER are report.json files, report folders, bundle archives or run
    folders (analyzed on the fly).  A `run --try` folder stands for its baseline arm as
    BEFORE and its try arm as AFTER; a `tune` folder for the original job as BEFORE and the
    final settings as AFTER (the first run of each).  One folder alone: a trial's baseline
    against its try arm, a tune's original job against its final settings.  Exit code 1
    when --max-regression is exceeded.
    """
    from ..analysis import AnalyzeOptions
    from ..api import analyzer
    from ..diagnosis import AnalysisContext
    from ..report.files import load_diagnosis, prepare
    from ..ticket import compare as cmp
    from ..trial.folders import compare_sides, trial_header

    del hta  # compare shows no HTA numbers: its sides are analyzed without the cross-check
    before, after, trial, notes = compare_sides(before, after)
    for note in notes:
        click.echo(f"ddpdoctor: {note}", err=True)
    rs = ruleset_in_force(rules_dirs, sets, no_config)
    sides = []
    for p, context in ((before, AnalysisContext.of(rs)), (after, AnalysisContext.of(rs))):  # each its own
        sides.append(prepare(load_diagnosis(p, analyzer(AnalyzeOptions(hta="off"), context)), secrets=context.secrets))
    c = cmp.compare(*sides, max_regression=max_regression)
    if trial is not None:
        c["trial"], header = trial_header(trial)
        if fmt != "json" and not quiet:
            sys.stdout.write(header)
    if not quiet:
        sys.stdout.write(cmp.render(c, fmt))
    if c["regressed"]:
        sys.exit(1)


from .rules import rules, rules_explain, rules_facts, rules_list, rules_test  # noqa: E402, F401  (`ddpdoctor rules`)
from .run import run as _run_command  # noqa: E402  (`ddpdoctor run`, issue #4)
from .tune import tune as _tune_command  # noqa: E402  (`ddpdoctor tune`, issue #31)

main.add_command(rules)
main.add_command(_run_command)
main.add_command(_tune_command)  # `ddpdoctor tune` (issue #31)
