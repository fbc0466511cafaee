"""What one trace file becomes: :class:`RankTrace`, normalized numpy arrays of host and device spans
(trace/normalize.py builds it from either reader's columns; metrics/ reads it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .messages import CollMessages, no_messages
from .schema import Trace


@dataclass
class Spans:
    """Host or device spans of one kind, as parallel arrays (times in µs)."""

    start: np.ndarray
    end: np.ndarray
    names: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, start: list, end: list, names: list | None = None) -> Spans:
        return cls(np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64), names or [])

    def __len__(self) -> int:
        return int(self.start.size)


@dataclass
class GpuOps:
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray  # 0 compute kernel, 1 communication kernel, 2 memcpy, 3 memset
    correlation: np.ndarray  # int64, -1 when absent
    comm_kind: list[str]  # collective kind for communication kernels, "" otherwise
    pageable_h2d: np.ndarray | None = None  # bool: host-to-device copy from pageable memory
    traits: np.ndarray | None = None  # int8 bit set of kernel-name traits (classify.KERNEL_TRAITS)
    names: list[str] | None = None  # kernel / copy names (for the report's top kernels)

    KERNEL, COMM, MEMCPY, MEMSET = 0, 1, 2, 3


@dataclass
class RankTrace:
    """Everything the per-rank breakdown needs from one trace file."""

    path: str
    rank: int | None
    rank_source: str
    world_size: int | None
    backend: str | None
    devices: list[str]
    host: str | None
    pid: int | None
    schema: str  # "2021" or "current"
    main_tid: int | str | None
    steps: list[tuple[str, float, float]]  # ProfilerStep#N host spans on the main thread
    dataloader: Spans  # DataLoader __next__ spans (main thread)
    host_ops: Spans  # cpu ops + runtime calls, every CPU thread of the process
    main_ops: Spans  # cpu ops on the main thread (no annotations)
    forward: Spans
    backward: Spans
    optimizer: Spans
    host_collectives: Spans  # gloo:* / nccl:* annotations (host side)
    runtime_launch: Spans  # runtime calls that carry a correlation id
    runtime_corr: np.ndarray
    gpu: GpuOps
    first_ts: float
    last_ts: float
    n_events: int
    runtime_alloc: Spans = field(default_factory=lambda: Spans.build([], []))  # cudaMalloc/Free, hipMalloc/Free
    runtime_sync: Spans = field(default_factory=lambda: Spans.build([], []))  # device/stream/event synchronize
    forward_inputs: list = field(default_factory=list)  # (forward start, input shapes) per forward pass
    coll_messages: CollMessages = field(default_factory=no_messages)
    decoder: str = ""  # which reader decoded the file, and why not the C one


def rank_trace(path: str, meta: Trace, rank_hint: int | None, rank_hint_source: str, main_pid, **parts) -> RankTrace:
    """The RankTrace of a normalized file: the rank and the run facts from the trace's top-level
    fields (``meta``), the rest as the normaliser built it."""
    dist = meta.distributedInfo
    rank = int_or_none(dist.rank) if dist else None
    rank_source = "distributedInfo" if rank is not None else (rank_hint_source if rank_hint is not None else "none")
    return RankTrace(
        path=path,
        rank=rank if rank is not None else rank_hint,
        rank_source=rank_source,
        world_size=int_or_none(dist.world_size) if dist else None,
        backend=dist.backend if dist else None,
        devices=[d.name for d in (meta.deviceProperties or []) if d.name],
        host=meta.host_name,
        pid=main_pid if isinstance(main_pid, int) else None,
        **parts,
    )


def int_or_none(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None
