"""What a mismatch report says, quoted with its facts: each side of a collective mismatch as the report gives it
(``failure.mismatch.side_a``/``side_b``: "sequence 485, shape [25], dtype Float", only what the report holds),
and ``failure.mismatch.param_*``: DDP's construction check (``verify_params_across_processes``) quoted with its
facts. Each rank compares its parameters with process 0's before DDP broadcasts rank 0's weights; the rank whose
parameter differs logs "params[0] in this process with sizes [384, 128] appears not to match sizes of the same
param in process 0" (which parameter, its sizes on that rank, the reference rank), and a rank with another number
of parameters "DDP expects same model across all ranks, but Rank 1 has 224 params, while rank 0 has inconsistent
222 params" (logs/families.py parses both)."""

from __future__ import annotations

from .model import LogEvent

QUOTE_KEYS = (
    "side_a",
    "side_b",
    "param_index",
    "param_sizes",
    "param_aspect",
    "param_rank",
    "param_reference_rank",
    "param_count_a",
    "param_count_b",
)


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def model_check_facts(m: LogEvent, f: dict) -> None:
    """Which parameter, which sizes (or strides), on which rank against which; or how many parameters each of
    two ranks holds."""
    a, b = m.data.get("a") or {}, m.data.get("b") or {}
    f["failure.mismatch.param_index"] = a.get("param")
    f["failure.mismatch.param_sizes"] = a.get("sizes") or a.get("strides")
    f["failure.mismatch.param_aspect"] = "strides" if a.get("strides") and not a.get("sizes") else "sizes"
    f["failure.mismatch.param_rank"] = m.rank if m.data.get("rank_a") is None else m.data["rank_a"]
    f["failure.mismatch.param_reference_rank"] = m.data.get("rank_b")
    f["failure.mismatch.param_count_a"] = _int(a.get("params"))
    f["failure.mismatch.param_count_b"] = _int(b.get("params"))


def side_facts(f: dict) -> None:
    """``failure.mismatch.side_a``/``side_b`` from the sequence, shape and dtype facts of each side (None when the
    report gives none of them)."""
    for side in ("a", "b"):
        parts = [
            f"{word} {f.get(f'failure.mismatch.{key}_{side}')}"
            for word, key in (("sequence", "seq"), ("shape", "shape"), ("dtype", "dtype"))
            if f.get(f"failure.mismatch.{key}_{side}") is not None
        ]
        f[f"failure.mismatch.side_{side}"] = ", ".join(parts) if parts else None
