"""Small readers every bundle module shares: a number or nothing, a rank's ``evidence`` record, a fact
put only when known (with its per-rank values when ranks differ), and a sampled place made safe to show."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ..redact import REDACTED, looks_like_secret

PROC_TICK_S = 0.01  # /proc/stat and /proc/<pid>/stat count CPU time in ticks of USER_HZ (100 on Linux)


def as_number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def evidence_of(d: dict) -> dict:
    ev = d.get("evidence")
    return ev if isinstance(ev, dict) else {}


def put_fact(facts: dict, name: str, value, per_rank: Mapping[int, object] | None = None) -> None:
    if value is None:
        return
    facts[name] = value
    if per_rank and len(per_rank) > 1:
        vals = [json.dumps(v, sort_keys=True) for v in per_rank.values()]
        if len(set(vals)) > 1:
            facts[f"{name}.per_rank"] = dict(sorted(per_rank.items()))


_ABS_PATH = re.compile(r"(?<![\w.\-])(?:[A-Za-z]:)?[\\/](?:[^\s:()\\/]+[\\/])+([^\s:()\\/]+)")


def safe_where(text) -> str | None:
    """A sampled place for a report: absolute paths cut to the file name (the agent writes
    none, but a bundle may be edited), credential-looking text redacted."""
    if not isinstance(text, str) or not text:
        return None
    text = _ABS_PATH.sub(lambda m: m.group(1), text)[:300]
    return REDACTED if looks_like_secret(text) else text
