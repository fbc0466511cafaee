"""A generated job laid out as plain ``tensorboard_trace_handler`` output, one folder per host.

The generator writes ``rank{r}.pt.trace.json.gz`` with the trace's own ``host_name`` (``node{n}``);
:func:`handler_layout` moves each rank's trace to ``node{n}/`` under the name the handler gives it,
``{hostname}_{pid}.{time_ns}.pt.trace.json.gz`` (``naming="handler"``) or ``{pid}.{time_ns}.pt.trace.json.gz``
(``naming="plain"``: no host in the name), with the ``host_name`` field removed unless kept.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from .scenario import Scenario

HOSTS = ("gpu-a01.cluster_x", "gpu-a02.cluster_x")  # '_' and '.' inside a host name, as real ones have
T0_NS = 1_732_500_000_000_000_000


def handler_layout(
    generated: Path, out: Path, sc: Scenario, naming: str = "handler", keep_host_name: bool = False
) -> list[Path]:
    """Move ``generated``'s rank traces into ``out/node{n}/``; returns the node folders."""
    if sc.ranks_per_node <= 0:
        raise ValueError("handler_layout needs ranks_per_node > 0")
    n_nodes = -(-sc.world_size // sc.ranks_per_node)
    nodes = [out / f"node{n}" for n in range(n_nodes)]
    for n in nodes:
        n.mkdir(parents=True, exist_ok=True)
    for r in range(sc.world_size):
        src = generated / f"rank{r}.pt.trace.json.gz"
        doc = json.loads(gzip.decompress(src.read_bytes()))
        if not keep_host_name:
            doc.pop("host_name", None)
        node = r // sc.ranks_per_node
        host = HOSTS[node] if node < len(HOSTS) else f"gpu-a{node + 1:02d}.cluster_x"
        pid = 4000 + r
        name = (
            f"{host}_{pid}.{T0_NS + r}.pt.trace.json.gz"
            if naming == "handler"
            else f"{pid}.{T0_NS + r}.pt.trace.json.gz"
        )
        (nodes[node] / name).write_bytes(gzip.compress(json.dumps(doc).encode(), 1, mtime=0))
        src.unlink()
    return nodes
