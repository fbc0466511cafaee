"""Small aggregates shared by the renderers."""

from __future__ import annotations

import numpy as np

from ..analysis import Analysis

# Costs a user can act on: the exclusive columns other than compute itself.
AVOIDABLE = ("dataloader_wait", "comm_exposed", "memcpy", "host_idle", "other")


def mean_shares(a: Analysis) -> dict[str, float | None]:
    """Per column, the mean over ranks of each rank's share of step time."""
    per_rank = [a.rank_share(s) for s in a.summaries]
    out = {}
    for col in per_rank[0] if per_rank else {}:
        vals = [r[col] for r in per_rank if r[col] is not None]
        out[col] = float(np.mean(vals)) if vals else None
    return out


def biggest_cost(a: Analysis) -> dict | None:
    shares = mean_shares(a)
    ranked = sorted(((shares[c], c) for c in AVOIDABLE if shares.get(c)), reverse=True)
    if not ranked:
        return None
    share, col = ranked[0]
    worst = max(a.summaries, key=lambda s: a.rank_share(s).get(col) or 0.0)
    return {"column": col, "share": share, "worst_rank": worst.rank,
            "worst_rank_share": a.rank_share(worst).get(col), "compute_share": shares.get("compute")}
