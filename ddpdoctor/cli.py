"""Command-line interface (click wiring only)."""

from __future__ import annotations

import os
import sys
import traceback

import click

from . import __version__
from .errors import InputError


def _fail(message: str, code: int) -> None:
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
        except BrokenPipeError:            # `ddpdoctor analyze … | head`: the reader left, not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if os.environ.get("DDPDOCTOR_DEBUG"):
                traceback.print_exc()
            _fail(f"internal error: {type(exc).__name__}: {exc} (set DDPDOCTOR_DEBUG=1 for details)", 1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ddpdoctor")
def main() -> None:
    """Why is my PyTorch DDP training slow, and what should I change?"""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write the analysis as JSON (schema ddpdoctor.analysis/1) to this file.")
@click.option("--all-windows", is_flag=True,
              help="Use every profiling window of a rank, not only the latest one.")
@click.option("-j", "--jobs", type=click.IntRange(1), default=None,
              help="Worker processes for decoding ranks in parallel (default: number of CPUs).")
@click.option("--comm-kernel", "comm_patterns", multiple=True, metavar="REGEX",
              help="Treat kernels whose name matches REGEX as communication (repeatable).")
@click.option("--hta", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="Cross-check with HolisticTraceAnalysis on GPU traces (auto: when the traces are small).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors (use with --json).")
def analyze(paths, json_path, all_windows, jobs, comm_patterns, hta, quiet):
    """Analyze torch.profiler traces: a per-rank, per-step time breakdown.

    PATHS are trace files (*.json, *.json.gz) or folders searched recursively: a
    `ddpdoctor run` bundle, a tensorboard_trace_handler folder, files from a ticket.
    """
    import re

    from .analysis import AnalyzeOptions, analyze as run_analysis
    from .metrics import hta_adapter
    from .report import terminal
    from .report.json_report import write_json

    for p in comm_patterns:
        try:
            re.compile(p)
        except re.error as exc:
            raise InputError(f"--comm-kernel {p!r} is not a valid regular expression ({exc})") from None
    opts = AnalyzeOptions(all_windows=all_windows, jobs=jobs, comm_patterns=tuple(comm_patterns), hta=hta)
    result = run_analysis(list(paths), opts)
    result.hta = hta_adapter.cross_check(result, mode=hta)
    if json_path:
        write_json(result, json_path)
    if not quiet:
        terminal.render(result)
        if json_path:
            click.echo(f"JSON written to {json_path}")

from .capture.cli import run as _run_command  # noqa: E402  (`ddpdoctor run`, issue #4)
main.add_command(_run_command)
