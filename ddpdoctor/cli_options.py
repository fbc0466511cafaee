"""Click options shared by `analyze` and `run` (and the `rules`, `compare` commands), defined once so
that the same flag has the same name, default and help everywhere (issue 27)."""

from __future__ import annotations

import os
import sys

import click

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


hta_option = click.option(
    "--hta",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Cross-check with HolisticTraceAnalysis on GPU traces (auto: when the traces are small).",
)

quiet_option = click.option(
    "-q", "--quiet", is_flag=True, help="Print nothing but errors (use with --json or --report)."
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
    args += ["--force"] if report_dir and force else []
    return args + (["-q"] if quiet else []) + (["-v"] if verbose else [])


def ruleset_in_force(rules_dirs, sets, no_config=False):
    """The rules in force (--rules, --set, --no-config), with the metrics.toml overrides they carry (an
    analysis applies them in its own context: ``AnalysisContext.of(ruleset)``)."""
    from .rules_engine.registry import build_ruleset

    return build_ruleset(list(rules_dirs), list(sets), use_config=not no_config)


def output_width(widest: int = 100) -> int:
    """The width text is laid out at: the terminal's (40 to ``widest``), or $COLUMNS (else 80) when piped."""
    import shutil

    if sys.stdout.isatty():
        return max(40, min(shutil.get_terminal_size((80, 24)).columns, widest))
    cols = os.environ.get("COLUMNS", "")
    return max(40, min(int(cols) if cols.isdigit() else 80, 200))
