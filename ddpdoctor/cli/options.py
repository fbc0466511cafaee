"""Click options shared by the commands (`analyze`, `run`, `tune`, `compare`, `bundle`, `report`, `rules`),
defined once so that the same flag has the same name, default and help everywhere (issues 27 and 41;
tests/test_cli_consistency.py checks every command against the table there)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import click

from ..errors import InputError
from ..report.renderers import RENDERERS

RULES_OPTIONS = [
    click.option(
        "--rules",
        "rules_dirs",
        multiple=True,
        type=click.Path(file_okay=False),
        help="A folder of extra rule files (*.toml); a rule with a built-in id replaces it (repeatable).",
    ),
    click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="RULE.param=VALUE",
        help="Override a rule threshold for this run (`ddpdoctor rules explain RULE` lists its "
        "parameters), or one of rules/metrics.toml, e.g. --set metrics.straggler.min_late_share=0.1 "
        "(repeatable).",
    ),
    click.option("--no-config", is_flag=True, help="Ignore [tool.ddpdoctor] in pyproject.toml and ddpdoctor.toml."),
]


def with_rules_options(f):
    for opt in reversed(RULES_OPTIONS):
        f = opt(f)
    return f


def with_analysis_options(f):
    """--rules, --set, --no-config and --hta: every command that analyzes a run (or may have to)."""
    return with_rules_options(hta_option(f))


hta_option_help = "Cross-check with HolisticTraceAnalysis on GPU traces (auto: when the traces are small)."
hta_option = click.option(
    "--hta", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True, help=hta_option_help
)

# `compare` prints no HTA numbers, so it never runs the cross-check; --hta stays accepted (hidden, the same
# option) for scripts that pass it to every command
hta_option_ignored = click.option(
    "--hta", type=click.Choice(["auto", "on", "off"]), default="auto", hidden=True, help=hta_option_help
)

quiet_option = click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")

verbose_option = click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Every finding, every fix and the per-rank table, not only the card (tune: of the final settings' run).",
)

json_option = click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Also write the diagnosis as JSON (schema ddpdoctor.diagnosis/1) to this file.",
)

report_option = click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    help="Write report.md, report.html, report.json and plots/*.png into this folder.",
)


# --format: one vocabulary in every command; the older spellings stay accepted for scripts that use them
FORMATS = tuple(RENDERERS)  # report/renderers.py: one table
FORMAT_ALIASES = {"text": "terminal", "markdown": "md"}


class FormatChoice(click.Choice):
    """A --format choice from FORMATS; an alias (``compare --format text``) is read as its canonical name."""

    def __init__(self, choices):
        unknown = set(choices) - set(FORMATS)
        if unknown:
            raise ValueError(f"--format names outside {FORMATS}: {sorted(unknown)}")
        self.canonical = tuple(choices)
        super().__init__(self.canonical)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and FORMAT_ALIASES.get(value) in self.canonical:
            value = FORMAT_ALIASES[value]
        return super().convert(value, param, ctx)


def format_option(choices, default, help):
    return click.option(
        "--format", "fmt", type=FormatChoice(choices), default=default, show_default=default is not None, help=help
    )


def default_folder(kind: str, now: float | None = None):
    """The folder `run --try` ("trial") or `tune` ("tune") writes when --out is not given, beside `run`'s
    ddpdoctor-out-YYYYmmdd-HHMMSS; all three are in the repository's .gitignore."""
    import time
    from pathlib import Path

    return Path(time.strftime(f"ddpdoctor-{kind}-%Y%m%d-%H%M%S", time.localtime(now)))


force_file_option = click.option(
    "--force", is_flag=True, help="Replace the output file when it already exists (never done without it)."
)


def refuse_overwrite(path, force: bool, option: str) -> None:
    """An output file the user already has is replaced only with --force: checked before any work, so a
    refusal costs nothing. A folder is never a file to write; a device or FIFO (/dev/null) is written to."""
    if not path:
        return
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError:
        return  # nothing there (or a dangling link): a new file
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{option} {p}: is a folder; give the name of a file to write")
    if stat.S_ISREG(st.st_mode) and not force:
        raise InputError(f"{option} {p}: the file already exists; add --force to replace it, or choose another name")


def analysis_args(
    rules_dirs=(),
    sets=(),
    no_config=False,
    hta="auto",
    quiet=False,
    json_path=None,
    report_dir=None,
    verbose=False,
    force=False,
) -> list[str]:
    """The same choices as `ddpdoctor analyze` arguments (run passes them to the analysis it starts)."""
    args = [a for d in rules_dirs for a in ("--rules", str(d))] + [a for s in sets for a in ("--set", s)]
    args += (["--no-config"] if no_config else []) + (["--hta", hta] if hta != "auto" else [])
    args += (["--json", str(json_path)] if json_path else []) + (["--report", str(report_dir)] if report_dir else [])
    args += ["--force"] if (report_dir or json_path) and force else []
    return args + (["-q"] if quiet else []) + (["-v"] if verbose else [])


def ruleset_in_force(rules_dirs, sets, no_config=False):
    """The rules in force (--rules, --set, --no-config), with the metrics.toml overrides they carry (an
    analysis applies them in its own context: ``AnalysisContext.of(ruleset)``)."""
    from ..rules_engine.registry import build_ruleset

    return build_ruleset(list(rules_dirs), list(sets), use_config=not no_config)


def output_width(widest: int = 100) -> int:
    """The width text is laid out at: the terminal's (40 to ``widest``), or $COLUMNS (else 80) when piped."""
    import shutil

    if sys.stdout.isatty():
        return max(40, min(shutil.get_terminal_size((80, 24)).columns, widest))
    cols = os.environ.get("COLUMNS", "")
    return max(40, min(int(cols) if cols.isdigit() else 80, 200))
