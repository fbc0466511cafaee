"""What the rule files declare about a fix's setting, for the trial and `tune`: the prediction model of
its knob (``predict = "…"`` on a ``[[fix]]``) and whether it changes numerics (``changes_numerics``).

Read from the built-in rules (rules/**.toml, parsed by rules_engine.model), so that no rule id is
written in ddpdoctor/trial: a finding of the diagnosis document names its rule, and the rule's fixes
say what their knobs need.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class FixTraits:
    predict: str | None = None  # a model of trial/predict.py (rules_engine.model.PREDICT_MODELS)
    changes_numerics: bool = False


NONE = FixTraits()


@lru_cache(maxsize=1)
def _table() -> dict[tuple[str, str], FixTraits]:
    from ..rules_engine.registry import load_rules

    out: dict[tuple[str, str], FixTraits] = {}
    for rule in load_rules().rules.values():
        for fx in rule.fixes:
            if not fx.knob:
                continue
            old = out.get((rule.id, fx.knob), NONE)
            # two fixes of one rule for the same knob (smaller / larger buckets): what either declares
            out[(rule.id, fx.knob)] = FixTraits(old.predict or fx.predict, old.changes_numerics or fx.changes_numerics)
    return out


def traits(rule: str | None, knob: str | None) -> FixTraits:
    """What RULE's fixes declare for KNOB (nothing declared: no model, numerics unchanged)."""
    if not rule or not knob:
        return NONE
    return _table().get((rule, knob), NONE)
