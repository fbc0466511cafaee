"""Fixes in the user's own terms: a fix that names the one setting it changes (``knob``) is
phrased in the framework the run used (``run.framework``: HF Trainer, Accelerate, Lightning),
from the table in ``rules/frameworks.toml``.  The framework's line comes first; the rule's
raw-PyTorch text follows as context.  Raw PyTorch (or no framework recorded) is unchanged."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache

from ..resources import rules_dir

RAW = "pytorch"


@dataclass(frozen=True)
class Phrasing:
    framework: str  # "hf_trainer" | "accelerate" | "lightning"
    name: str  # "Hugging Face Trainer"
    setting: str  # "TrainingArguments(..., ddp_find_unused_parameters=False)"


@lru_cache(maxsize=1)
def framework_table() -> dict[str, dict]:
    path = rules_dir() / "frameworks.toml"
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    for fw, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("knobs"), dict) or "name" not in entry:
            raise ValueError(f"{path}: [{fw}] needs a name and a [{fw}.knobs] table")
    return data


def phrase(framework: object, knob: str | None, value: str | None) -> Phrasing | None:
    """The framework's own setting for ``knob`` = ``value``; None when the run is raw PyTorch,
    the framework is unknown, or it has no setting for that knob."""
    if not isinstance(framework, str) or framework == RAW or not knob or value is None:
        return None
    entry = framework_table().get(framework)
    if entry is None:
        return None
    template = entry["knobs"].get(knob)
    if template is None:
        return None
    return Phrasing(framework, entry["name"], template.replace("{value}", value))


def phrased_change(p: Phrasing, raw_change: str) -> str:
    """The framework's setting first, the rule's raw-PyTorch change after it as context."""
    head = f"In {p.name}: {p.setting}"
    if not raw_change.strip():
        return head
    return f"{head}\n(what it does underneath, in raw PyTorch terms:)\n{raw_change}"
