"""The analysis as JSON (``"schema": "ddpdoctor.analysis/1"``): the stable interface later
stages (rules, reports) and other tools read."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

from .. import __version__
from ..analysis import Analysis
from ..metrics.columns import COLUMNS, PARTITION_CPU, PARTITION_GPU
from .summary import biggest_cost

SCHEMA = "ddpdoctor.analysis/1"


def _clean(x):
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else round(x, 3)
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def to_dict(a: Analysis) -> dict:
    table = []
    ranks = {}
    for s in a.summaries:
        for i, w in enumerate(s.steps):
            vals = {c: s.values[c][i] for c in COLUMNS}
            st = vals["step_time"]
            share = {c: (None if v is None or not st else v / st) for c, v in vals.items()}
            table.append({"rank": s.rank, "step": w.name, "step_number": w.number, "start_us": w.start,
                          "end_us": w.end, "us": vals, "share": share})
        n = len(s.steps)
        ranks[str(s.rank)] = {
            "files": s.paths, "device_kind": s.device_kind, "backend": s.backend, "devices": sorted(set(s.devices)),
            "host": s.host, "schema": s.schema, "step_source": s.step_source, "comm_source": s.comm_source,
            "steps": n, "events": s.n_events, "collectives": len(s.collectives),
            "mean_us": {c: (None if s.values[c][0] is None or not n else sum(s.values[c]) / n) for c in COLUMNS},
            "share": a.rank_share(s), "notes": s.notes,
        }
    cross = asdict(a.cross)
    cost = biggest_cost(a)
    return _clean({
        "schema": SCHEMA,
        "ddpdoctor_version": __version__,
        "inputs": a.inputs,
        "world_size": a.discovery.world_size,
        "ranks_present": [s.rank for s in a.summaries],
        "partial": a.partial,
        "warnings": a.warnings,
        "columns": COLUMNS,
        "partition": {"gpu": list(PARTITION_GPU), "cpu": list(PARTITION_CPU)},
        "table": table,
        "ranks": ranks,
        "cross_rank": cross,
        "biggest_cost": cost,
        "hta": a.hta,
        "timing": {"seconds": a.seconds, "bytes_read": a.bytes_read},
    })


def write_json(a: Analysis, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(to_dict(a), fh, indent=1, allow_nan=False)
        fh.write("\n")
