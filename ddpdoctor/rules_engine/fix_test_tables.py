"""The [[fix]] and [[test]] tables of a rule file: :class:`Fix` and :class:`RuleCase`, and the
checks of a fix's knob and of its keys for ``ddpdoctor tune`` (parsed by model.parse_rule)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..expr import Expr
from ..template import Template, VariantTemplate


@dataclass
class Fix:
    title: Template | VariantTemplate
    change: Template | VariantTemplate
    kind: str = "code"
    applies_if: Expr | None = None
    # the one setting this fix changes (e.g. "dataloader.num_workers", "ddp.bucket_cap_mb") and its
    # new value, so that the fix can be phrased in the user's framework (HF Trainer, Lightning, …)
    knob: str | None = None
    value: Template | None = None
    # where the fix goes among the finding's fixes: those whose `leads_if` holds first, those whose `trails_if`
    # holds last, the others between; each group as written (an answer not recorded moves nothing)
    leads_if: Expr | None = None
    trails_if: Expr | None = None
    # for `ddpdoctor tune` / `run --try` (docs/TUNE.md): the model trial/predict.py uses for this fix's knob
    # (one of PREDICT_MODELS; default: the finding's upper bound), and whether the setting changes what the
    # model computes (a compression hook, a precision): then tune never keeps it without --allow-numerics
    predict: str | None = None
    changes_numerics: bool = False


# prediction models of trial/predict.py a fix may name (`predict = "…"`)
PREDICT_MODELS = ("collective_count", "halved_bytes")


@dataclass
class RuleCase:
    name: str
    expect: str  # "fire", "quiet" or "abstain"
    facts: dict
    params: dict = field(default_factory=dict)
    log: list[dict] = field(default_factory=list)
    summary_contains: list[str] = field(default_factory=list)
    ranks: list[int] | None = None
    fixes_contain: list[str] = field(default_factory=list)  # each must appear in some fix
    fixes_exclude: list[str] = field(default_factory=list)  # none may appear in any fix
    first_fix: str | None = None  # must appear in the first fix's title
    unset: list[str] = field(default_factory=list)  # base facts this case does not have
    base: dict = field(default_factory=dict)  # the base facts of the rule's folder (basefacts.py; set at load)

    def all_facts(self) -> dict:
        """The case's facts as stored: its folder's base facts, without ``unset``, updated by its own."""
        out = {k: v for k, v in self.base.items() if k not in self.unset}
        out.update(self.facts)
        return out


KNOB_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z0-9_]+)+$")  # env.NCCL_SOCKET_IFNAME keeps its case


def knob(c, fx: dict, after: int) -> str | None:
    knob = fx.get("knob")
    if knob is None:
        if "value" in fx:
            c.fail("value", "a fix's 'value' goes with a 'knob' (the setting it is the value of)", after)
        return None
    if not isinstance(knob, str) or not KNOB_PATTERN.match(knob):
        c.fail("knob", f"knob {knob!r} is not a dotted setting name such as 'dataloader.num_workers'", after)
    if "value" not in fx:
        c.fail("knob", f"knob {knob!r} needs a 'value' template", after)
    return knob


def tune_keys(c, fx: dict, after: int) -> tuple[str | None, bool]:
    """A fix's `predict` and `changes_numerics` keys (they describe a setting: they need a knob)."""
    model, numerics = fx.get("predict"), fx.get("changes_numerics", False)
    if model is not None and model not in PREDICT_MODELS:
        c.fail("predict", f"predict {model!r} is not one of {', '.join(PREDICT_MODELS)}", after)
    if not isinstance(numerics, bool):
        c.fail("changes_numerics", "changes_numerics is true or false", after)
    if (model is not None or numerics) and fx.get("knob") is None:
        c.fail(
            "predict" if model is not None else "changes_numerics",
            "'predict' and 'changes_numerics' describe a setting: the fix needs a 'knob'",
            after,
        )
    return model, numerics
