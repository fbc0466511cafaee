"""Plain `tensorboard_trace_handler` output built with the synthetic generator (ddpdoctor_synth): 8 ranks,
4 per host, files named `{hostname}_{pid}.{time_ns}.pt.trace.json.gz`, one folder per host."""

from __future__ import annotations

import shutil
from pathlib import Path

from ddpdoctor_synth import Scenario, generate
from ddpdoctor_synth.handler import HOSTS, handler_layout  # noqa: F401 - HOSTS for the tests


def handler_job(
    folder: Path,
    skew_ms: float,
    straggler: int | None,
    naming: str = "handler",
    host_name: bool = False,
    extra_us: float = 8000.0,
) -> list[Path]:
    """The second host's clock ``skew_ms`` ahead, ``straggler`` computing ``extra_us`` longer each step;
    returns the node folders.  ``host_name``: keep the trace's own host_name field (node0, node1)."""
    sc = Scenario(
        world_size=8,
        steps=6,
        ranks_per_node=4,
        node_skew_ms=[0.0, skew_ms],
        straggler_rank=straggler,
        straggler_extra_us=extra_us if straggler is not None else 0.0,
        kernel_us=500.0,
        end_jitter_us=20.0,
        name="handler_hosts",
    )
    raw = folder / "_generated"
    generate(sc, raw)
    nodes = handler_layout(raw, folder, sc, naming=naming, keep_host_name=host_name)
    shutil.rmtree(raw)
    return nodes
