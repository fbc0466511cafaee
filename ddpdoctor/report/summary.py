"""Small aggregates shared by the renderers."""

from __future__ import annotations

import numpy as np

from ..analysis import Analysis

def mean_shares(a: Analysis) -> dict[str, float | None]:
    """Per column, the mean over ranks of each rank's share of step time."""
    per_rank = [a.rank_share(s) for s in a.summaries]
    out = {}
    for col in per_rank[0] if per_rank else {}:
        vals = [r[col] for r in per_rank if r[col] is not None]
        out[col] = float(np.mean(vals)) if vals else None
    return out
