"""folder = category = id prefix, as declared in rules/layout.toml and checked when the rules load.

Each category with built-in rules has one line: its id prefix and the folder under rules/ that holds
its rules. A built-in rule in another folder, or whose id does not start with its category's prefix,
is refused with a one-line error naming the file (a RuleError: exit 2). A user rule (``--rules``) may
live in any folder and use a prefix of its own; one whose id starts with a declared prefix must have
that prefix's category. Moving a category's rules to another folder is one line of rules/layout.toml.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .model import CATEGORIES, Rule, RuleError, key_line

LAYOUT_FILE = "layout.toml"
PREFIX_PATTERN = re.compile(r"^[A-Z]{2,4}$")


@dataclass(frozen=True)
class Place:
    category: str
    prefix: str
    folder: str


@dataclass(frozen=True)
class Layout:
    path: str
    places: tuple[Place, ...]

    def of_category(self, category: str) -> Place | None:
        return next((p for p in self.places if p.category == category), None)

    def of_prefix(self, prefix: str) -> Place | None:
        return next((p for p in self.places if p.prefix == prefix), None)


def id_prefix(rule_id: str) -> str:
    """The capital letters an id starts with."""
    m = re.match(r"[A-Z]*", rule_id)
    return m.group(0) if m else ""


@lru_cache(maxsize=8)
def load_layout(rules_root: Path) -> Layout:
    """rules/layout.toml of this rules folder, checked (every problem names the file and line)."""
    path = Path(rules_root) / LAYOUT_FILE
    try:
        text = path.read_text(encoding="utf-8")
        table = tomllib.loads(text).get("categories")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RuleError(f"{path}: cannot read the layout of the rules ({exc})") from None
    if not isinstance(table, dict) or not table:
        raise RuleError(f'{path}:1: needs a [categories] table: category = {{ prefix = "…", folder = "…" }}')
    places: list[Place] = []
    for category, spec in table.items():
        where = f"{path}:{key_line(text, category)}"
        if category not in CATEGORIES:
            raise RuleError(f"{where}: {category!r} is not a category ({', '.join(CATEGORIES)})")
        if not isinstance(spec, dict) or set(spec) != {"prefix", "folder"}:
            raise RuleError(f"{where}: {category} needs exactly prefix and folder")
        prefix, folder = spec["prefix"], spec["folder"]
        if not isinstance(prefix, str) or not PREFIX_PATTERN.match(prefix):
            raise RuleError(f"{where}: prefix {prefix!r} must be 2-4 capital letters")
        if not isinstance(folder, str) or not re.match(r"^[a-z][a-z0-9_-]*$", folder):
            raise RuleError(f"{where}: folder {folder!r} must be one lower-case folder name under rules/")
        if any(p.prefix == prefix for p in places):
            raise RuleError(f"{where}: prefix {prefix} is already the prefix of another category")
        places.append(Place(category, prefix, folder))
    return Layout(str(path), tuple(places))


def check_rule(layout: Layout, rule: Rule, rules_root: Path | None) -> None:
    """Refuse a rule out of place: ``rules_root`` is the built-in rules folder (None for a user rule)."""
    text = Path(rule.path).read_text(encoding="utf-8") if rule.path else ""
    prefix = id_prefix(rule.id)
    by_prefix = layout.of_prefix(prefix)
    if by_prefix is not None and by_prefix.category != rule.category:
        raise RuleError(
            f"{rule.path}:{key_line(text, 'category')}: rule {rule.id} has category {rule.category}, "
            f"but ids starting with {prefix} are {by_prefix.category} rules ({layout.path})"
        )
    if rules_root is None:
        return
    place = layout.of_category(rule.category)
    if place is None:
        raise RuleError(
            f"{rule.path}:{key_line(text, 'category')}: category {rule.category} has no line in "
            f"{layout.path} (its id prefix and folder)"
        )
    if prefix != place.prefix:
        raise RuleError(
            f"{rule.path}:{key_line(text, 'id')}: the id of a {rule.category} rule starts with "
            f"{place.prefix}, not {rule.id} ({layout.path})"
        )
    folder = Path(rule.path).resolve().parent
    if folder != (Path(rules_root) / place.folder).resolve():
        here = (
            folder.relative_to(Path(rules_root).resolve())
            if folder.is_relative_to(Path(rules_root).resolve())
            else folder
        )
        raise RuleError(
            f"{rule.path}:1: a {rule.category} rule belongs in rules/{place.folder}/, "
            f"not in rules/{here}/ ({layout.path})"
        )
