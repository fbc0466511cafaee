"""The summary of a run no cost decides: why none does (each small, set aside as machine noise, or at its
line), or, when no rule could classify it, where its step goes (the breakdown the trace gave) and what is
missing to decide — above all, when only one rank was analyzed, what a second rank's trace would add."""

from __future__ import annotations

from statistics import median

from ..text import PHASE_WORDS

# the reason a cost set aside as noise carries (verdict.py writes it into Cost.why_not)
NOISE = "machine noise, not the workload"
_SHORT = {"comm_exposed": "exposed communication", "dataloader_wait": "waiting for data"}
# a breakdown share above this is named as where the step goes
_NAMED_SHARE = 0.005


def _shares(facts: dict) -> list[tuple[str, float]]:
    """(column, median share over the analyzed ranks) of the partition columns, largest first."""
    out = []
    for col in facts.get("run.partition") or []:
        per_rank = facts.get(f"rank.share.{col}")  # a Vec while rules run, a {rank: share} dict in a document
        raw = per_rank.values() if isinstance(per_rank, dict) else getattr(per_rank, "values", None)
        vals = [float(v) for v in (raw if raw is not None else []) if _number(v)]
        if vals:
            out.append((col, float(median(vals))))
    return sorted(out, key=lambda cv: -cv[1])


def _number(v) -> bool:
    try:
        return not isinstance(v, bool) and v is not None and float(v) == float(v)  # NaN is not a share
    except (TypeError, ValueError):
        return False


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def undetermined_summary(facts: dict) -> str:
    ranks = facts.get("run.ranks") or []
    one = len(ranks) == 1
    whose = f"rank {ranks[0]}'s step" if one else "the step"
    shares = [(c, s) for c, s in _shares(facts) if s >= _NAMED_SHARE]
    parts = []
    if shares:
        top, top_share = shares[0]
        rest = ", ".join(f"{_SHORT.get(c, PHASE_WORDS.get(c, c))} {_pct(s)}" for c, s in shares[1:4])
        if top == "other":
            parts.append(
                f"{_pct(top_share)} of {whose} is outside any traced operator (its own Python code, sleeps, "
                "untraced waits)" + (f"; {rest}" if rest else "")
            )
        else:
            parts.append(
                f"{whose[0].upper() + whose[1:]} goes to {PHASE_WORDS.get(top, top)} {_pct(top_share)}"
                + (f", {rest}" if rest else "")
            )
    world = facts.get("run.world_size")
    if one and (world is None or world > 1):
        parts.append(
            "a second rank's trace would tell whether the others wait for this one in their collectives (a "
            "straggler): `ddpdoctor run` records every rank"
        )
    else:
        parts.append("no rule's evidence reached its threshold")
    return "; ".join(parts) + " (-v: what each rule needed)"


def no_dominant_summary(costs: list, findings: list, t: dict) -> str:
    """Why no cost decides the run: each one is small, or was set aside as machine noise (the two are
    said apart: a 21 % straggler on a contended host is not "small")."""

    def listed(cs: list) -> str:
        return ", ".join(f"{c.label} {c.cost:.1%}" for c in cs[:3])

    noise = [c for c in costs if c.material and not c.eligible and NOISE in (c.why_not or "")]
    rest = [c for c in costs if c not in noise and not c.at_line]  # at its line: said by edge.name_at_line
    parts = []
    if noise:
        contention = sorted({f.rule for f in findings if f.rule in t.get("contention_rules", [])})
        parts.append(
            f"what the rules found was set aside as machine noise on a contended host ({listed(noise)}; "
            f"see {', '.join(contention) or 'the contention finding'}: re-record on an idle host to tell)"
        )
    if rest:
        parts.append(f"what {'else ' if noise else ''}the rules found stays small ({listed(rest)})")
    if not parts:  # only costs at their line (edge.name_at_line says which)
        parts.append("what the rules found is within the step-to-step noise of its threshold")
    return f"no dominant avoidable cost: {'; '.join(parts)}; no single change promises a large gain"
