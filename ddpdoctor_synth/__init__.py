"""Synthetic multi-rank torch.profiler/Kineto traces of DDP training with a known truth.

>>> from ddpdoctor_synth import Scenario, generate
>>> truth = generate(Scenario(world_size=4, steps=5), "out", gzip=True)   # doctest: +SKIP

writes ``out/rank{r}.pt.trace.json(.gz)`` for every rank and ``out/truth.json``.  The truth
columns use the analyzer's definitions and are computed from the generator's own layout
(see :func:`ddpdoctor_synth.timeline.measure`).  No torch, no GPU.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .scenario import PHASES, RankSpec, Scenario, dump_scenario, load_scenario, scenario_from_dict, scenario_from_shares
from .timeline import Layout, RankStep, measure
from .writer import RankTraceWriter

__all__ = [
    "Scenario",
    "RankSpec",
    "Truth",
    "generate",
    "load_scenario",
    "dump_scenario",
    "scenario_from_shares",
    "scenario_from_dict",
    "resolve_size",
    "trace_path",
    "PHASES",
    "COLUMNS",
    "TRUTH_SCHEMA",
    "main",
]

TRUTH_SCHEMA = "ddpdoctor.synth-truth/1"
COLUMNS = (
    "step_time",
    "compute",
    "comm",
    "comm_exposed",
    "memcpy",
    "gpu_busy",
    "dataloader_wait",
    "host_idle",
    "other",
    "forward",
    "backward",
    "optimizer",
    "comm_sync_wait",
    "comm_transfer",
)
MAX_STEPS_FOR_TARGET = 2000
BUS_BANDWIDTH_BYTES_PER_US = 100_000.0  # 100 GB/s, only to fill "In msg nelems"


@dataclass
class Truth:
    """What the analyzer should find.  Shares are means over the profiled steps of
    ``column / step_time`` (so ``step_time`` is 1.0); ``*_us`` are means in µs."""

    per_rank: dict[int, dict[str, float]]
    per_rank_us: dict[int, dict[str, float]]
    straggler: int | None
    straggler_late_us: float
    step_time_us: dict[int, float]
    late_us: dict[int, float] = field(default_factory=dict)  # mean lateness at each step's 1st collective
    steps: int = 0
    step_names: list[str] = field(default_factory=list)
    files: dict[int, str] = field(default_factory=dict)
    bytes_per_rank: dict[int, int] = field(default_factory=dict)  # uncompressed JSON bytes
    scenario: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("per_rank", "per_rank_us", "step_time_us", "late_us", "files", "bytes_per_rank"):
            d[k] = {str(r): v for r, v in d[k].items()}
        return {"schema": TRUTH_SCHEMA, **d}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Truth:
        if d.get("schema") != TRUTH_SCHEMA:
            raise ValueError(f"not a {TRUTH_SCHEMA} document")
        kw = {k: v for k, v in d.items() if k != "schema"}
        for k in ("per_rank", "per_rank_us", "step_time_us", "late_us", "files", "bytes_per_rank"):
            kw[k] = {int(r): v for r, v in kw.get(k, {}).items()}
        return cls(**kw)

    @classmethod
    def load(cls, path: str | Path) -> Truth:
        return cls.from_json(json.loads(Path(path).read_text()))


def trace_path(out_dir: str | Path, rank: int, gzip: bool) -> Path:
    return Path(out_dir) / f"rank{rank}.pt.trace.json{'.gz' if gzip else ''}"


def _bucket_nelems(sc: Scenario, layout: Layout) -> list[int]:
    if sc.bucket_kb is not None:
        return [max(1, int(sc.bucket_kb * 1000 / 4))] * len(layout.T)
    W = sc.world_size
    factor = 2 * (W - 1) / W if W > 1 else 1.0
    return [max(1, int(t / 1000 * BUS_BANDWIDTH_BYTES_PER_US / factor / 4)) for t in layout.T]


def _step_bytes(sc: Scenario, id_offset: int = 0) -> tuple[int, int]:
    """Uncompressed bytes of rank 0's first step, and the ids it uses."""
    sc1 = replace(sc, steps=1, target_mb_per_rank=None)
    lay = Layout(sc1)
    rows = next(lay.steps(1))
    w = RankTraceWriter(None, sc1, 0, lay.h, id_offset=id_offset)
    w.step(rows[0], sc.first_step, _bucket_nelems(sc1, lay))
    return w.bytes, w.ext - id_offset


def resolve_size(sc: Scenario) -> Scenario:
    """If ``target_mb_per_rank`` is set, the scenario with ``steps`` (and, past
    MAX_STEPS_FOR_TARGET steps, ``filler_cpu_ops_per_kernel``) chosen to reach about that
    many uncompressed MB per rank; otherwise ``sc`` itself."""
    if sc.target_mb_per_rank is None:
        return sc
    target = sc.target_mb_per_rank * 1e6 - 6000  # header and footer
    b, ids = _step_bytes(sc)
    if target / b > MAX_STEPS_FOR_TARGET:
        b8, _ = _step_bytes(replace(sc, filler_cpu_ops_per_kernel=sc.filler_cpu_ops_per_kernel + 8))
        slope = max((b8 - b) / 8, 1.0)
        extra = int((target / MAX_STEPS_FOR_TARGET - b) / slope) + 1
        sc = replace(sc, filler_cpu_ops_per_kernel=sc.filler_cpu_ops_per_kernel + extra)
        b, ids = _step_bytes(sc)
    n = max(1, round(target / b))
    # ids get longer further into the trace: measure a step from the middle
    b, _ = _step_bytes(sc, id_offset=ids * (n // 2))
    return replace(sc, steps=max(1, round(target / b)))


def _simulate(sc: Scenario, out_dir: Path | None, ranks: list[int], gzip: bool, compresslevel: int) -> dict[str, Any]:
    """Lay out all ranks, write ``ranks``; return sums for the truth."""
    lay = Layout(sc)
    nelems = _bucket_nelems(sc, lay)
    writers = {
        r: RankTraceWriter(
            trace_path(out_dir, r, gzip) if out_dir else None, sc, r, lay.h, gzip=gzip, compresslevel=compresslevel
        )
        for r in ranks
    }
    sums = {r: dict.fromkeys(COLUMNS, 0.0) for r in ranks}
    shares = {r: dict.fromkeys(COLUMNS, 0.0) for r in ranks}
    late = [0.0] * sc.world_size
    try:
        for w in writers.values():
            w.header()
        for i, rows in enumerate(lay.steps(sc.steps)):
            _collective_truth(rows, late)
            for r in ranks:
                rs = rows[r]
                m = measure(rs)
                m.update(_comm_cols(rows, r))
                st = m["step_time"]
                for k in COLUMNS:
                    sums[r][k] += m[k]
                    shares[r][k] += m[k] / st
                writers[r].step(rs, sc.first_step + i, nelems)
        for w in writers.values():
            w.footer()
    finally:
        for w in writers.values():
            w.close()
    return {"sums": sums, "shares": shares, "late": late, "bytes": {r: w.bytes for r, w in writers.items()}}


def _comm_cols(rows: list[RankStep], r: int) -> dict[str, int]:
    wait = transfer = 0
    for j in range(len(rows[r].nccl)):
        durs = [e - s for s, e in (rs.nccl[j] for rs in rows)]
        mn = min(durs)
        transfer += mn
        wait += durs[r] - mn
    return {"comm_sync_wait": wait, "comm_transfer": transfer}


def _collective_truth(rows: list[RankStep], late: list[float]) -> None:
    """Lateness of each rank at the step's first collective: its NCCL kernel start minus
    the median start of the other ranks."""
    if len(rows) < 2 or not rows[0].nccl:
        return
    arr = [rs.nccl[0][0] for rs in rows]
    for r, a in enumerate(arr):
        late[r] += a - statistics.median(arr[:r] + arr[r + 1 :])


def _work(args: tuple) -> dict[str, Any]:
    sc_dict, out_dir, ranks, gzip, level = args
    return _simulate(scenario_from_dict(sc_dict), Path(out_dir), ranks, gzip, level)


def generate(sc: Scenario, out_dir: str | Path, gzip: bool = True, jobs: int = 1, compresslevel: int = 1) -> Truth:
    """Write ``out_dir/rank{r}.pt.trace.json[.gz]`` for every rank and ``out_dir/truth.json``.

    ``jobs > 1`` writes the ranks from that many processes (each lays out all ranks, which
    is cheap, and formats its own).  ``compresslevel`` is gzip's (1 = fastest).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sc = resolve_size(sc)
    ranks = list(range(sc.world_size))
    jobs = max(1, min(jobs, len(ranks)))
    if jobs == 1:
        parts = [_simulate(sc, out, ranks, gzip, compresslevel)]
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        d = sc.to_dict()
        groups = [ranks[i::jobs] for i in range(jobs)]
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as ex:
            parts = list(ex.map(_work, [(d, str(out), g, gzip, compresslevel) for g in groups]))
    n = sc.steps
    per_rank, per_rank_us, bytes_ = {}, {}, {}
    for p in parts:
        for r in p["sums"]:
            per_rank_us[r] = {k: v / n / 1000.0 for k, v in p["sums"][r].items()}
            per_rank[r] = {k: v / n for k, v in p["shares"][r].items()}
            bytes_[r] = p["bytes"][r]
    late_us = {r: v / n / 1000.0 for r, v in enumerate(parts[0]["late"])}
    straggler, late = None, 0.0
    if sc.world_size > 1 and late_us:
        r_max = max(late_us, key=lambda r: late_us[r])
        if late_us[r_max] > 1.0:
            straggler, late = r_max, late_us[r_max]
    truth = Truth(
        per_rank={r: per_rank[r] for r in ranks},
        per_rank_us={r: per_rank_us[r] for r in ranks},
        straggler=straggler,
        straggler_late_us=late,
        step_time_us={r: per_rank_us[r]["step_time"] for r in ranks},
        late_us=late_us,
        steps=n,
        step_names=[f"ProfilerStep#{sc.first_step + i}" for i in range(n)],
        files={r: trace_path(out, r, gzip).name for r in ranks},
        bytes_per_rank={r: bytes_[r] for r in ranks},
        scenario=sc.to_dict(),
    )
    (out / "truth.json").write_text(json.dumps(truth.to_json(), indent=1) + "\n")
    return truth


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m ddpdoctor_synth", description="Write synthetic multi-rank DDP Kineto traces and their truth."
    )
    ap.add_argument("scenario", help="scenario TOML file")
    ap.add_argument("out_dir")
    ap.add_argument("--gzip", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--target-mb", type=float, default=None, help="uncompressed MB per rank")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=1, help="writer processes")
    a = ap.parse_args(argv)
    sc = load_scenario(a.scenario)
    if a.steps is not None:
        sc = replace(sc, steps=a.steps)
    if a.target_mb is not None:
        sc = replace(sc, target_mb_per_rank=a.target_mb)
    t = time.perf_counter()
    truth = generate(sc, a.out_dir, gzip=a.gzip, jobs=a.jobs)
    dt = time.perf_counter() - t
    mb = sum(truth.bytes_per_rank.values()) / 1e6
    st = statistics.median(truth.step_time_us.values())
    strag = (
        f"straggler rank {truth.straggler} late {truth.straggler_late_us:.0f} us"
        if truth.straggler is not None
        else "no straggler"
    )
    print(
        f"{a.out_dir}: {sc.world_size} ranks x {truth.steps} steps, {mb / sc.world_size:.1f} MB/rank "
        f"({mb:.1f} MB json) in {dt:.1f} s ({mb / dt:.0f} MB/s); step {st / 1000:.1f} ms; {strag}"
    )
    return 0
