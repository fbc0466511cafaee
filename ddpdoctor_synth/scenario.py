"""What a synthetic DDP run looks like: :class:`Scenario`, :class:`RankSpec`, TOML I/O.

All durations are microseconds.  One profiled step of one rank is laid out as::

    DataLoader wait | H2D memcpy | forward kernels | host gap (GPU idle, host busy)
    | backward kernels (+ overlapped all-reduces) | exposed all-reduces | optimizer kernels

The six phase durations form a :class:`RankSpec`; the flat fields of :class:`Scenario`
are the default spec of every rank and ``rank_overrides`` changes some ranks.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

PHASES = ("dataloader_us", "h2d_us", "forward_us", "host_gap_us", "backward_us", "optimizer_us")


@dataclass
class RankSpec:
    """Per-rank phase durations (µs) of one step."""

    dataloader_us: float = 2000.0  # host waits in the DataLoader, GPU idle
    h2d_us: float = 1000.0  # HtoD memcpy of the batch
    forward_us: float = 28000.0  # forward compute kernels
    host_gap_us: float = 2000.0  # GPU idle while the host runs CPU-only ops (launch-bound)
    backward_us: float = 56000.0  # backward compute kernels
    optimizer_us: float = 6000.0  # optimizer compute kernels


_SPEC_DEFAULTS = RankSpec()


@dataclass
class Scenario:
    """A synthetic multi-rank run; every field has a default (a ≈100 ms step on 4 ranks)."""

    world_size: int = 4
    steps: int = 5  # profiled steps, ProfilerStep#{first_step + i}
    first_step: int = 10
    # default RankSpec of every rank
    dataloader_us: float = _SPEC_DEFAULTS.dataloader_us
    h2d_us: float = _SPEC_DEFAULTS.h2d_us
    forward_us: float = _SPEC_DEFAULTS.forward_us
    host_gap_us: float = _SPEC_DEFAULTS.host_gap_us
    backward_us: float = _SPEC_DEFAULTS.backward_us
    optimizer_us: float = _SPEC_DEFAULTS.optimizer_us
    # communication (the same on every rank: a collective is one transfer)
    buckets: int = 4  # all-reduces per step
    comm_us: float = 20000.0  # total transfer time of all buckets per step
    comm_overlap: float = 0.75  # fraction of comm_us that runs under backward kernels
    # straggler: that rank's forward is longer by straggler_extra_us every step
    straggler_rank: int | None = None
    straggler_extra_us: float = 0.0
    # size and shape of the trace
    kernel_us: float = 50.0  # typical kernel length
    filler_cpu_ops_per_kernel: int = 0
    seed: int = 0
    target_mb_per_rank: float | None = None  # uncompressed JSON MB per rank; sets steps
    # nodes: ranks r*ranks_per_node.. on host "node{n}" (0 = no host names written); node n's clock
    # reads node_skew_ms[n] ms ahead of the true time (missing entries: 0), as NTP leaves it
    ranks_per_node: int = 0
    node_skew_ms: list[float] = field(default_factory=list)
    end_jitter_us: float = 0.0  # noise (σ) on each rank's recorded all-reduce kernel ends
    # KB of float32 gradients in every all-reduce's record ("In msg nelems"); None: what comm_us moves at
    # 100 GB/s (bandwidth-bound). A latency-bound job sends small messages that still take comm_us
    bucket_kb: float | None = None
    rank_overrides: dict[int, dict[str, float]] = field(default_factory=dict)
    name: str = "synthetic"

    def __post_init__(self) -> None:
        self.rank_overrides = {int(r): _override_dict(v) for r, v in (self.rank_overrides or {}).items()}
        self.validate()

    # ------------------------------------------------------------------ specs
    @property
    def default_spec(self) -> RankSpec:
        return RankSpec(**{p: float(getattr(self, p)) for p in PHASES})

    def spec(self, rank: int) -> RankSpec:
        """The phase durations of ``rank``: the default spec with its override applied."""
        return replace(self.default_spec, **self.rank_overrides.get(rank, {}))

    def node_of(self, rank: int) -> int | None:
        return rank // self.ranks_per_node if self.ranks_per_node > 0 else None

    def host_of(self, rank: int) -> str | None:
        n = self.node_of(rank)
        return None if n is None else f"node{n}"

    def skew_ns(self, rank: int) -> int:
        n = self.node_of(rank)
        return 0 if n is None or n >= len(self.node_skew_ms) else int(round(self.node_skew_ms[n] * 1e6))

    def validate(self) -> None:
        if self.world_size < 1:
            raise ValueError("world_size must be >= 1")
        if self.steps < 1:
            raise ValueError("steps must be >= 1")
        if self.buckets < 0:
            raise ValueError("buckets must be >= 0")
        if self.comm_us < 0 or self.straggler_extra_us < 0:
            raise ValueError("comm_us and straggler_extra_us must be >= 0")
        if not 0.0 <= self.comm_overlap <= 1.0:
            raise ValueError("comm_overlap must be within 0..1")
        if self.kernel_us <= 0:
            raise ValueError("kernel_us must be > 0")
        if self.filler_cpu_ops_per_kernel < 0:
            raise ValueError("filler_cpu_ops_per_kernel must be >= 0")
        if self.straggler_rank is not None and not 0 <= self.straggler_rank < self.world_size:
            raise ValueError(f"straggler_rank {self.straggler_rank} is not a rank of world_size {self.world_size}")
        if not (math.isfinite(self.end_jitter_us) and self.end_jitter_us >= 0):
            raise ValueError("end_jitter_us must be a finite number >= 0")
        if self.bucket_kb is not None and not (math.isfinite(self.bucket_kb) and self.bucket_kb > 0):
            raise ValueError("bucket_kb must be a finite number > 0")
        if self.ranks_per_node < 0:
            raise ValueError("ranks_per_node must be >= 0")
        nodes = -(-self.world_size // self.ranks_per_node) if self.ranks_per_node else 0
        if self.node_skew_ms and len(self.node_skew_ms) > nodes:
            raise ValueError(
                f"node_skew_ms has {len(self.node_skew_ms)} entries for {nodes} node(s) (set ranks_per_node)"
            )
        if any(not (math.isfinite(x) and abs(x) <= 1000.0) for x in self.node_skew_ms):
            raise ValueError("node_skew_ms entries must be finite, within ±1000 ms")
        if self.target_mb_per_rank is not None and self.target_mb_per_rank <= 0:
            raise ValueError("target_mb_per_rank must be > 0")
        for r in self.rank_overrides:
            if not 0 <= r < self.world_size:
                raise ValueError(f"rank_overrides names rank {r}, outside world_size {self.world_size}")
        for r in range(self.world_size):
            s = self.spec(r)
            for p in PHASES:
                v = getattr(s, p)
                if not (v >= 0 and math.isfinite(v)):
                    raise ValueError(f"rank {r}: {p} must be a finite number >= 0, got {v!r}")
            if self.has_comm and s.backward_us <= 0:
                raise ValueError(f"rank {r}: all-reduces need backward_us > 0 (they are launched from backward)")

    @property
    def has_comm(self) -> bool:
        return self.buckets > 0 and self.comm_us > 0

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rank_overrides"] = {str(r): dict(v) for r, v in sorted(self.rank_overrides.items())}
        return d

    def to_toml(self) -> str:
        """TOML text that :func:`load_scenario` reads back into an equal Scenario."""
        lines = [f"# ddpdoctor synthetic scenario: {self.name}"]
        for f in fields(self):
            if f.name == "rank_overrides":
                continue
            v = getattr(self, f.name)
            if v is not None:
                lines.append(f"{f.name} = {_toml_value(v)}")
        for r, ov in sorted(self.rank_overrides.items()):
            lines += ["", "[[rank_overrides]]", f"rank = {r}"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in ov.items()]
        return "\n".join(lines) + "\n"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"cannot write {v!r} to TOML")


def _override_dict(v: RankSpec | dict) -> dict[str, float]:
    """A RankSpec replaces all six phases; a dict replaces only the phases it names."""
    if isinstance(v, RankSpec):
        return {p: float(getattr(v, p)) for p in PHASES}
    if not isinstance(v, dict):
        raise TypeError(f"a rank override must be a RankSpec or a dict, got {type(v).__name__}")
    bad = set(v) - set(PHASES)
    if bad:
        raise ValueError(f"unknown rank override fields {sorted(bad)}; known: {list(PHASES)}")
    return {p: float(v[p]) for p in PHASES if p in v}


def scenario_from_dict(d: dict[str, Any]) -> Scenario:
    """A Scenario from a TOML-like dict; ``rank_overrides`` may be a list of tables with
    ``rank = N`` (or ``ranks = [..]``) or a mapping rank -> fields."""
    d = dict(d)
    known = {f.name for f in fields(Scenario)}
    bad = set(d) - known
    if bad:
        raise ValueError(f"unknown scenario fields {sorted(bad)}")
    ovs = d.pop("rank_overrides", None) or {}
    overrides: dict[int, dict] = {}
    if isinstance(ovs, dict):
        overrides = {int(r): dict(v) for r, v in ovs.items()}
    else:
        for table in ovs:
            table = dict(table)
            ranks = [table.pop("rank")] if "rank" in table else list(table.pop("ranks", []))
            if not ranks:
                raise ValueError("each [[rank_overrides]] table needs rank = N or ranks = [...]")
            for r in ranks:
                overrides.setdefault(int(r), {}).update(table)
    float_fields = set(PHASES) | {"comm_us", "comm_overlap", "straggler_extra_us", "kernel_us", "end_jitter_us"}
    for k in list(d):
        if k in float_fields:
            d[k] = float(d[k])
        elif k in ("target_mb_per_rank", "bucket_kb") and d[k] is not None:
            d[k] = float(d[k])
        elif k == "node_skew_ms":
            d[k] = [float(x) for x in d[k]]
    return Scenario(**d, rank_overrides=overrides)


def load_scenario(path: str | Path) -> Scenario:
    """Read a TOML scenario (same field names as :class:`Scenario`; ``[[rank_overrides]]`` tables)."""
    with open(path, "rb") as f:
        d = tomllib.load(f)
    d.setdefault("name", Path(path).stem)
    return scenario_from_dict(d)


def dump_scenario(sc: Scenario, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(sc.to_toml())
    return path


# The layout adds a few fixed µs of GPU idle per step (launch latency after the DataLoader);
# scenario_from_shares subtracts it from host_gap_us so the host_idle target is met.
def launch_unit_ns(kernel_us: float) -> int:
    """Host launch granularity ``h`` (ns): a runtime call is ``h`` before its kernel."""
    return max(20, min(int(round(kernel_us * 1000)) // 20, 5000))


def fixed_host_idle_us(kernel_us: float, h2d_us: float) -> float:
    h = launch_unit_ns(kernel_us)
    idle = 3 * h + (max(0, 4 * h - int(round(h2d_us * 1000))) if h2d_us > 0 else 0)
    return idle / 1000.0


def scenario_from_shares(
    step_us: float = 100000.0,
    dataloader: float = 0.30,
    comm: float = 0.40,
    comm_exposed: float = 0.20,
    host_idle: float = 0.0,
    memcpy: float = 0.01,
    compute_split: tuple[float, float, float] = (0.30, 0.62, 0.08),
    straggler_rank: int | None = None,
    straggler_extra_us: float = 0.0,
    **kwargs: Any,
) -> Scenario:
    """Durations that give the target shares of ``step_us`` on every non-straggler rank.

    ``comm`` and ``comm_exposed`` are what a non-straggler rank shows, i.e. they include the
    time its NCCL kernels wait for the straggler (``straggler_extra_us`` per step).  The
    straggler itself shows ``comm - extra/step`` and ``comm_exposed - extra/step``, and its
    compute share is larger by the same amount; step time is ``step_us`` on every rank.
    ``compute_split`` divides the remaining compute time among forward/backward/optimizer.
    Other keyword arguments go to :class:`Scenario` (world_size, steps, buckets, kernel_us...).
    """
    e = float(straggler_extra_us) if straggler_rank is not None else 0.0
    for n, v in (
        ("dataloader", dataloader),
        ("comm", comm),
        ("comm_exposed", comm_exposed),
        ("host_idle", host_idle),
        ("memcpy", memcpy),
    ):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{n} share must be within 0..1")
    if comm_exposed > comm:
        raise ValueError("comm_exposed cannot exceed comm")
    dl, h2d = dataloader * step_us, memcpy * step_us
    # the others wait for the straggler inside their NCCL kernels, after their own backward
    comm_total, exposed = comm * step_us - e, comm_exposed * step_us - e
    if exposed < 0:
        raise ValueError(
            "the straggler's wait is exposed comm on the other ranks: "
            "comm_exposed * step_us must be >= straggler_extra_us"
        )
    kernel_us = float(kwargs.get("kernel_us", Scenario.kernel_us))
    fixed = fixed_host_idle_us(kernel_us, h2d)
    host_gap = max(0.0, host_idle * step_us - fixed)
    compute = step_us - dl - h2d - (exposed + e) - (host_gap + fixed)
    if compute <= 0:
        raise ValueError("the shares leave no time for compute")
    fs = [max(0.0, x) for x in compute_split]
    tot = sum(fs) or 1.0
    fwd, bwd = compute * fs[0] / tot, compute * fs[1] / tot
    opt = compute - fwd - bwd
    overlapped = comm_total - exposed
    if comm_total > 0 and overlapped > bwd - 8 * launch_unit_ns(kernel_us) / 1000.0:
        raise ValueError(
            "overlapped comm does not fit under the backward kernels; "
            "lower comm - comm_exposed or raise the backward share"
        )
    kwargs.setdefault("name", "from_shares")
    return Scenario(
        dataloader_us=dl,
        h2d_us=h2d,
        forward_us=fwd,
        host_gap_us=host_gap,
        backward_us=bwd,
        optimizer_us=opt,
        comm_us=max(comm_total, 0.0),
        comm_overlap=(overlapped / comm_total) if comm_total > 0 else 0.0,
        straggler_rank=straggler_rank,
        straggler_extra_us=e,
        **kwargs,
    )
