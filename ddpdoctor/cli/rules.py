"""The `ddpdoctor rules` click command group (registered in ddpdoctor/cli/commands.py): list, explain, facts, test."""

from __future__ import annotations

import sys

import click

from .options import output_width, ruleset_in_force, with_rules_options


@click.group()
def rules() -> None:
    """List, explain and test the diagnosis rules."""


@rules.command("list")
@with_rules_options
def rules_list(rules_dirs, sets, no_config):
    """One line per rule: id, category, severity, name, title."""
    from ..text import wrap

    rs = ruleset_in_force(rules_dirs, sets, no_config)
    width = output_width(200)
    for r in rs.active():
        origin = "" if r.origin == "built-in" else f"  [{r.path}]"
        head = f"{r.id}  {r.category:<13} {r.severity:<8} "
        line = f"{head}{r.name:<36} {r.title}{origin}"
        if len(line) <= width:
            click.echo(line)
        else:  # narrower: the id line, then the title under it
            click.echo(f"{head}{r.name}")
            for part in wrap(r.title + origin, width, " " * 7):
                click.echo(part)
    for n in rs.notes:
        for part in wrap(f"note: {n}", width, "", "      "):
            click.echo(part)


@rules.command("explain")
@click.argument("rule_id")
@with_rules_options
def rules_explain(rule_id, rules_dirs, sets, no_config):
    """What a rule detects, why it matters, its fixes, references and params."""
    from ..rules_engine.explain import explain

    rs = ruleset_in_force(rules_dirs, sets, no_config)
    click.echo(explain(rs.get(rule_id), rs.params.get(rs.get(rule_id).id, {}), output_width()))


@rules.command("facts")
@click.option("--markdown", is_flag=True, help="Print docs/FACTS.md (the catalogue as Markdown tables).")
def rules_facts(markdown):
    """The facts rules can read (rules/facts.toml): name, type, scope, unit, source."""
    from ..fact_catalogue import default_catalogue
    from ..fact_catalogue import markdown as render

    cat = default_catalogue()
    if markdown:
        sys.stdout.write(render(cat))
        return
    from ..text import wrap

    width = output_width(200)
    for name in cat.names():
        s = cat.lookup(name)
        line = f"{name:<48} {s.type:<6} {s.scope:<5} {s.unit:<6} {s.source:<7} {s.meaning}"
        if len(line) <= width:
            click.echo(line)
        else:  # narrower: name and kind on one line, the meaning wrapped under it
            kind = ", ".join(x for x in (s.type, s.scope, s.unit, s.source) if x)
            click.echo(f"{name}  ({kind})")
            for part in wrap(s.meaning, width, "    "):
                click.echo(part)


@rules.command("test")
@click.option(
    "--update",
    is_flag=True,
    help="Write each rule's snapshot (rules/<folder>/snapshots/<id>.snap) "
    "from what its cases render now; review the diff before committing.",
)
@with_rules_options
def rules_test(update, rules_dirs, sets, no_config):
    """Run the test cases stored in every rule file and compare what they render with each rule's
    snapshot; exit 1 if a case fails or a snapshot differs (a diff is printed), 2 on a malformed rule."""
    from pathlib import Path

    from ..resources import rules_dir
    from ..rules_engine.selftest import run_all

    rs = ruleset_in_force(rules_dirs, sets, no_config)
    disabled = [r for rid, r in rs.rules.items() if rid in rs.disabled]
    sys.exit(run_all(rs.active(), [rules_dir(), *map(Path, rules_dirs)], update, click.echo, disabled))
