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


def _ruleset(rules_dirs, sets, no_config=False):
    from .rules_engine.registry import build_ruleset

    return build_ruleset(list(rules_dirs), list(sets), use_config=not no_config)


_rules_options = [
    click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
                 help="A folder of extra rule files (*.toml); a rule with a built-in id replaces it (repeatable)."),
    click.option("--set", "sets", multiple=True, metavar="RULE.param=VALUE",
                 help="Override a rule threshold for this run, e.g. --set DL001.min_wait_share=0.2 (repeatable)."),
    click.option("--no-config", is_flag=True,
                 help="Ignore [tool.ddpdoctor] in pyproject.toml and ddpdoctor.toml."),
]


def _with_rules_options(f):
    for opt in reversed(_rules_options):
        f = opt(f)
    return f


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write the diagnosis as JSON (schema ddpdoctor.diagnosis/1) to this file.")
@click.option("--all-windows", is_flag=True,
              help="Use every profiling window of a rank, not only the latest one.")
@click.option("-j", "--jobs", type=click.IntRange(1), default=None,
              help="Worker processes for decoding ranks in parallel (default: number of CPUs).")
@click.option("--comm-kernel", "comm_patterns", multiple=True, metavar="REGEX",
              help="Treat kernels whose name matches REGEX as communication (repeatable).")
@click.option("--hta", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="Cross-check with HolisticTraceAnalysis on GPU traces (auto: when the traces are small).")
@_with_rules_options
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors (use with --json).")
def analyze(paths, json_path, all_windows, jobs, comm_patterns, hta, rules_dirs, sets, no_config, quiet):
    """Diagnose a run: why is it slow or why did it fail, and what to change.

    PATHS are trace files (*.json, *.json.gz), log files, or folders searched
    recursively: a `ddpdoctor run` bundle, a tensorboard_trace_handler folder, traces
    and logs from a ticket.
    """
    import re

    from .analysis import AnalyzeOptions
    from .diagnosis import run_analyze
    from .metrics import hta_adapter
    from .report.diagnosis_terminal import render_report
    from .report.json_report import write_json

    for p in comm_patterns:
        try:
            re.compile(p)
        except re.error as exc:
            raise InputError(f"--comm-kernel {p!r} is not a valid regular expression ({exc})") from None
    ruleset = _ruleset(rules_dirs, sets, no_config)
    opts = AnalyzeOptions(all_windows=all_windows, jobs=jobs, comm_patterns=tuple(comm_patterns), hta=hta)
    report = run_analyze(list(paths), opts, ruleset)
    if report.analysis is not None:
        report.analysis.hta = hta_adapter.cross_check(report.analysis, mode=hta)
    if json_path:
        write_json(report, json_path)
    if not quiet:
        render_report(report)
        if json_path:
            click.echo(f"JSON written to {json_path}")


@main.group()
def rules() -> None:
    """List, explain and test the diagnosis rules."""


@rules.command("list")
@_with_rules_options
def rules_list(rules_dirs, sets, no_config):
    """One line per rule: id, category, severity, name, title."""
    rs = _ruleset(rules_dirs, sets, no_config)
    for r in rs.active():
        origin = "" if r.origin == "built-in" else f"  [{r.path}]"
        click.echo(f"{r.id}  {r.category:<13} {r.severity:<8} {r.name:<36} {r.title}{origin}")
    for n in rs.notes:
        click.echo(f"note: {n}")


@rules.command("explain")
@click.argument("rule_id")
@_with_rules_options
def rules_explain(rule_id, rules_dirs, sets, no_config):
    """What a rule detects, why it matters, its fixes, references and params."""
    from .rules_engine.explain import explain

    rs = _ruleset(rules_dirs, sets, no_config)
    click.echo(explain(rs.get(rule_id), rs.params.get(rs.get(rule_id).id, {})))


@rules.command("test")
@_with_rules_options
def rules_test(rules_dirs, sets, no_config):
    """Run the test cases stored in every rule file; exit 1 if one fails."""
    from .rules_engine.selftest import run_case

    rs = _ruleset(rules_dirs, sets, no_config)
    failed = total = 0
    for r in rs.active():
        if not r.tests:
            click.echo(f"{r.id}: no test cases")
            failed += 1
        for case in r.tests:
            total += 1
            problems = run_case(r, case)
            if problems:
                failed += 1
                click.echo(f"FAIL {r.id} {case.name}: {'; '.join(problems)}")
    click.echo(f"{total - failed if failed <= total else 0} of {total} rule test cases passed")
    if failed:
        sys.exit(1)
