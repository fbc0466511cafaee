"""Plain `tensorboard_trace_handler` output built from the synthetic generator (ddpdoctor/synth): files
named `{hostname}_{pid}.{time_ns}.pt.trace.json.gz`, one folder per host, without the traces' own
`host_name` unless asked for."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from ddpdoctor.synth import Scenario, generate

HOSTS = ("gpu-a01.cluster_x", "gpu-a02.cluster_x")      # '_' and '.' inside a host name, as real ones have
T0_NS = 1_732_500_000_000_000_000


def handler_job(folder: Path, skew_ms: float, straggler: int | None, naming: str = "handler",
                host_name: bool = False, extra_us: float = 8000.0) -> list[Path]:
    """8 ranks, 4 per host, the second host's clock ``skew_ms`` ahead; returns the node folders.

    ``naming``: "handler" (`{host}_{pid}.{ns}.pt.trace.json.gz`) or "plain" (`{pid}.{ns}.pt.trace.json.gz`,
    no host in the name).  ``host_name``: keep the trace's own host_name field (the synthetic host names)."""
    raw = folder / "_generated"
    sc = Scenario(world_size=8, steps=6, ranks_per_node=4, node_skew_ms=[0.0, skew_ms], straggler_rank=straggler,
                  straggler_extra_us=extra_us if straggler is not None else 0.0, kernel_us=500.0,
                  end_jitter_us=20.0, name="handler_hosts")
    generate(sc, raw)
    nodes = [folder / f"node{n}" for n in range(2)]
    for n in nodes:
        n.mkdir(parents=True, exist_ok=True)
    for r in range(8):
        src = raw / f"rank{r}.pt.trace.json.gz"
        doc = json.loads(gzip.decompress(src.read_bytes()))
        if not host_name:
            doc.pop("host_name", None)
        pid = 4000 + r
        host = HOSTS[r // 4]
        name = f"{host}_{pid}.{T0_NS + r}.pt.trace.json.gz" if naming == "handler" else f"{pid}.{T0_NS + r}.pt.trace.json.gz"
        (nodes[r // 4] / name).write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
        src.unlink()
    (raw / "truth.json").unlink(missing_ok=True)
    raw.rmdir()
    return nodes
