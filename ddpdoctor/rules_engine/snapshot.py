"""One snapshot per rule: what each of its ``[[test]]`` cases produced (the status, the ranks, the exact
summary and the exact fix titles in order), in ``snapshots/<rule id>.snap`` beside the rule file.

``ddpdoctor rules test`` renders every rule's cases and compares them with its snapshot (a unified diff on a
mismatch); ``ddpdoctor rules test --update`` writes the snapshots (and removes those of rules that no
longer exist) so that the change is reviewed as a diff of these files. Plain text, one block per case in the
order of the rule file, so that a merge conflict is resolved by running ``--update`` again.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from .engine import Outcome
from .model import Rule

SNAPSHOT_DIR = "snapshots"
SUFFIX = ".snap"


def snapshot_path(rule: Rule) -> Path:
    return Path(rule.path).parent / SNAPSHOT_DIR / f"{rule.id}{SUFFIX}"


def _lines(label: str, text: str) -> list[str]:
    """``label: text``, further lines of the text indented by two spaces."""
    first, *rest = text.split("\n")
    return [f"{label}: {first}".rstrip(), *(f"  {line}".rstrip() for line in rest)]


def render_case(name: str, out: Outcome) -> list[str]:
    lines = [f"## {name}"]
    if out.status == "error":
        return lines + _lines("error", out.error or "")
    f = out.finding
    if f is None:
        return lines + [out.status + (f" (missing: {', '.join(sorted(out.missing))})" if out.missing else "")]
    lines.append(f"fire on ranks {', '.join(map(str, f.ranks))}" if f.ranks else "fire")
    lines += _lines("summary", f.summary)
    for i, fx in enumerate(f.fixes, 1):
        lines += _lines(f"fix {i}", fx.title)
    return lines


def render(rule: Rule, outcomes: list[tuple[str, Outcome]]) -> str:
    head = [
        f"# {rule.id} {rule.name}: the outcome of each [[test]] case of {Path(rule.path).name}.",
        "# Written by `ddpdoctor rules test --update`; review its diff before committing.",
    ]
    body: list[str] = []
    for name, out in outcomes:
        body += ["", *render_case(name, out)]
    return "\n".join(head + body) + "\n"


def diff(rule: Rule, text: str) -> list[str]:
    """The unified diff from the stored snapshot to ``text`` (empty when they are the same)."""
    path = snapshot_path(rule)
    try:
        stored = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        head = f"--- {path} (missing: run `ddpdoctor rules test --update`)"
        return [head] + [f"+{line}" for line in text.splitlines()]
    if stored == text:
        return []
    return [
        line.rstrip("\n")
        for line in difflib.unified_diff(
            stored.splitlines(), text.splitlines(), f"{path} (stored)", f"{path} (now)", lineterm=""
        )
    ]


def write(rule: Rule, text: str) -> bool:
    """Store ``text`` as the rule's snapshot; True when the file changed."""
    path = snapshot_path(rule)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def orphans(rules: list[Rule], roots: list[Path]) -> list[Path]:
    """Snapshots that belong to no rule (a rule removed, renamed or moved to another folder): in the
    rules' snapshot folders and in ``<root>/*/snapshots`` of each root."""
    wanted = {snapshot_path(r).resolve() for r in rules}
    folders = {snapshot_path(r).parent for r in rules}
    folders |= {d for root in roots for d in Path(root).glob(f"*/{SNAPSHOT_DIR}")}
    return sorted(p for d in folders if d.is_dir() for p in d.glob(f"*{SUFFIX}") if p.resolve() not in wanted)
