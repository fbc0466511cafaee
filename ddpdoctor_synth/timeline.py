"""Lay out every rank's profiled steps on one shared clock, in integer nanoseconds.

The layout is what both the trace writer and the truth read, so the truth is exact.

Host model ("just in time"): the runtime call that launches a kernel starts ``h`` before the
kernel does; the host op around it starts ``3h`` before the kernel, and consecutive ops of a
run of back-to-back kernels are contiguous on their thread (op k ends where op k+1 starts).
Every stretch of GPU idle time outside the DataLoader is therefore covered by a cpu_op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from .scenario import RankSpec, Scenario, launch_unit_ns

T0_NS = 10_000_000_000  # first step starts 10 s after baseTimeNanoseconds
_I64 = np.int64


def ns(us: float) -> int:
    return int(round(us * 1000.0))


@dataclass(slots=True)
class Run:
    """Back-to-back kernels on one stream launched from one host thread."""

    gs: np.ndarray  # kernel starts (ns)
    d: np.ndarray  # kernel durations (ns)
    op_s: np.ndarray  # launching host op spans, contiguous
    op_e: np.ndarray

    @property
    def end(self) -> int:
        return int(self.gs[-1] + self.d[-1])


def make_run(t0: int, durs: np.ndarray, h: int, last_op_end: int | None = None) -> Run:
    gs = t0 + np.concatenate([np.zeros(1, _I64), np.cumsum(durs[:-1], dtype=_I64)])
    op_s = gs - 3 * h
    op_e = np.empty_like(op_s)
    op_e[:-1] = op_s[1:]
    # the last op ends 3h before the last kernel does, so the host span of a run equals
    # its GPU span (shifted 3h earlier) whenever the last kernel is at least 4h long
    op_e[-1] = max(gs[-1] + h, gs[-1] + durs[-1] - 3 * h) if last_op_end is None else last_op_end
    return Run(gs.astype(_I64), durs.astype(_I64), op_s, op_e)


def split(total: int, kernel_ns: int, rng: np.random.Generator) -> np.ndarray:
    """``total`` ns as kernels of about ``kernel_ns`` (±25 %), summing exactly."""
    if total <= 0:
        return np.zeros(0, _I64)
    n = max(1, int(round(total / kernel_ns)))
    if n == 1:
        return np.array([total], _I64)
    w = rng.uniform(0.75, 1.25, n)
    d = np.floor(total * (w / w.sum())).astype(_I64)
    d[-1] += total - int(d.sum())
    return d


@dataclass(slots=True)
class RankStep:
    rank: int
    step: int  # index among the profiled steps
    S: int  # step (and CPU span) start
    E: int = 0  # step end = end of its last GPU activity
    main: int = 0  # main-thread cursor while laying out
    B1: int = 0  # end of the backward kernels
    dl: tuple[int, int] | None = None
    h2d: tuple[int, int, int, int] | None = None  # op_s, op_e, gpu start, dur
    fwd: Run | None = None
    fwd_ann: tuple[int, int] = (0, 0)
    cpu_ops: list[tuple[int, int]] = field(default_factory=list)  # CPU-only ops, main thread
    bwd: Run | None = None
    bwd_launch: dict[int, list[int]] = field(default_factory=dict)  # kernel idx -> buckets
    nccl_slot: list[tuple[int, int]] = field(default_factory=list)  # host span of nccl:all_reduce
    ready: list[int] = field(default_factory=list)
    nccl: list[tuple[int, int]] = field(default_factory=list)  # GPU start, end
    opt: Run | None = None
    opt_ann: tuple[int, int] = (0, 0)
    zero_grad: tuple[int, int] = (0, 0)
    sync: tuple[int, int] = (0, 0)


class Layout:
    """Steps of all ranks, one step at a time (collectives couple the ranks)."""

    def __init__(self, sc: Scenario):
        self.sc = sc
        self.h = launch_unit_ns(sc.kernel_us)
        self.K = max(ns(sc.kernel_us), 1)
        self.specs = [sc.spec(r) for r in range(sc.world_size)]
        self.T: list[int] = []
        if sc.has_comm:
            C = ns(sc.comm_us)
            self.T = [C // sc.buckets] * sc.buckets
            self.T[-1] += C - sum(self.T)

    def steps(self, n_steps: int, t0: int = T0_NS) -> Iterator[list[RankStep]]:
        starts = [t0] * self.sc.world_size
        for i in range(n_steps):
            rows = [self._front(r, i, starts[r]) for r in range(self.sc.world_size)]
            self._chain(rows)
            for rs in rows:
                self._back(rs)
            starts = [rs.E for rs in rows]
            yield rows

    # -------------------------------------------------------------- phases
    def _rng(self, rank: int, step: int) -> np.random.Generator:
        return np.random.default_rng([self.sc.seed, rank, step])

    def _front(self, rank: int, step: int, S: int) -> RankStep:
        sc, h, K = self.sc, self.h, self.K
        spec: RankSpec = self.specs[rank]
        rng = self._rng(rank, step)
        rs = RankStep(rank=rank, step=step, S=S)
        main = S
        if ns(spec.dataloader_us) > 0:
            rs.dl = (S, S + ns(spec.dataloader_us))
            main = rs.dl[1]
        gpu_free = main
        if ns(spec.h2d_us) > 0:
            gm = main + 3 * h
            rs.h2d = (main, gm + h, gm, ns(spec.h2d_us))
            main, gpu_free = gm + h, gm + ns(spec.h2d_us)
        fwd_us = spec.forward_us + (sc.straggler_extra_us if rank == sc.straggler_rank else 0.0)
        durs = split(ns(fwd_us), K, rng)
        if durs.size:
            rs.fwd = make_run(max(gpu_free, main + 3 * h), durs, h)
            rs.fwd_ann = (int(rs.fwd.op_s[0]), int(rs.fwd.op_e[-1]))
            main, f_end = rs.fwd_ann[1], rs.fwd.end
        else:
            rs.fwd_ann = (main, main + h)
            rs.cpu_ops.append(rs.fwd_ann)
            main = f_end = max(gpu_free, main + h)
        # host gap: the GPU has nothing queued while the host runs CPU-only ops
        B0 = max(f_end + ns(spec.host_gap_us), main + 3 * h)
        gap_end = B0 - 3 * h
        if gap_end > main:
            n = max(1, int(round((gap_end - main) / K)))
            edges = np.linspace(main, gap_end, n + 1).round().astype(_I64).tolist()
            rs.cpu_ops.extend(zip(edges[:-1], edges[1:]))
            main = gap_end
        rs.main = main
        self._backward(rs, spec, B0, rng)
        return rs

    def _backward(self, rs: RankStep, spec: RankSpec, B0: int, rng: np.random.Generator) -> None:
        h, K, sc = self.h, self.K, self.sc
        B1 = B0 + ns(spec.backward_us)
        rs.B1 = B1
        if B1 <= B0:
            return
        L = 8 * h  # shortest stretch between two bucket boundaries
        snapped: list[int] = []
        if self.T:
            C = sum(self.T)
            t = B1 - int(round(sc.comm_overlap * C))
            prev = B0
            for Tj in self.T:
                R = min(max(t, B0 + L), B1)
                if B1 - R < L:
                    R = B1
                if R - prev < L and prev > B0:
                    R = prev
                snapped.append(R)
                prev = R
                t += Tj
        bounds = sorted(set(snapped) | {B1})
        pieces, last_idx, lo = [], {}, B0
        n = 0
        for b in bounds:
            d = split(b - lo, K, rng)
            pieces.append(d)
            n += d.size
            last_idx[b] = n - 1
            lo = b
        durs = np.concatenate(pieces)
        last_has_launch = bool(snapped) and snapped[-1] == B1
        gs_last = B1 - int(durs[-1])
        last_end = max(gs_last + 2 * h, B1 - 3 * h) if last_has_launch else None
        rs.bwd = run = make_run(B0, durs, h, last_end)
        for j, R in enumerate(snapped):
            rs.bwd_launch.setdefault(last_idx[R], []).append(j)
        rs.nccl_slot = [(0, 0)] * len(snapped)
        rs.ready = list(snapped)
        for p, js in rs.bwd_launch.items():
            a = int(run.gs[p]) + h + h // 4
            b = int(run.op_e[p]) - h // 4
            w = max((b - a) // len(js), 6)
            for i, j in enumerate(js):
                s0 = a + i * w
                s1 = s0 + w - w // 8
                rs.nccl_slot[j] = (s0, s1)
                rs.ready[j] = max(rs.ready[j], s1)

    def _chain(self, rows: list[RankStep]) -> None:
        """A collective ends on every rank at max(arrival) + transfer; NCCL kernels of
        one rank run in order on their stream."""
        prev_end = -1
        for j, Tj in enumerate(self.T):
            starts = [max(rs.ready[j], prev_end) for rs in rows]
            end = max(starts) + Tj
            for rs, st in zip(rows, starts):
                rs.nccl.append((st, end))
            prev_end = end

    def _back(self, rs: RankStep) -> None:
        h, K = self.h, self.K
        spec = self.specs[rs.rank]
        rng = self._rng(rs.rank, rs.step + 1_000_003)
        chain_end = rs.nccl[-1][1] if rs.nccl else rs.B1
        o0 = max(rs.B1, chain_end, rs.main + 3 * h)
        durs = split(ns(spec.optimizer_us), K, rng)
        if durs.size:
            rs.opt = make_run(o0, durs, h)
            rs.opt_ann = (int(rs.opt.op_s[0]), int(rs.opt.op_e[-1]))
            gpu_end = max(rs.opt.end, chain_end)
        else:
            s = max(rs.main, o0 - h)
            rs.opt_ann = (s, s + h)
            rs.cpu_ops.append(rs.opt_ann)
            gpu_end = max(chain_end, rs.B1, rs.fwd.end if rs.fwd else 0, rs.h2d[2] + rs.h2d[3] if rs.h2d else 0)
        main = rs.opt_ann[1]
        rs.zero_grad = (main, main + h)
        main += h
        rs.E = max(gpu_end, main + h // 2)
        rs.sync = (main, rs.E)


# ---------------------------------------------------------------------- truth
def union_len(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> int:
    """Length of the union of [s, e) clipped to [lo, hi)."""
    s = np.clip(s, lo, hi)
    e = np.clip(e, lo, hi)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return 0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    covered = np.empty_like(e)
    covered[0] = s[0]
    covered[1:] = np.maximum.accumulate(e)[:-1]
    return int(np.clip(e - np.maximum(s, covered), 0, None).sum())


def _cat(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not parts:
        return np.zeros(0, _I64), np.zeros(0, _I64)
    return (
        np.concatenate([np.asarray(p[0], _I64).ravel() for p in parts]),
        np.concatenate([np.asarray(p[1], _I64).ravel() for p in parts]),
    )


def _pairs(spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(spans, _I64).reshape(-1, 2)
    return a[:, 0], a[:, 1]


def measure(rs: RankStep) -> dict[str, int]:
    """The analyzer's columns (ns) for one rank's step, from the layout."""
    lo, hi = rs.S, rs.E
    runs = [r for r in (rs.fwd, rs.bwd, rs.opt) if r is not None]
    comp = _cat([(r.gs, r.gs + r.d) for r in runs])
    comm = _pairs(rs.nccl)
    mem = _pairs([(rs.h2d[2], rs.h2d[2] + rs.h2d[3])] if rs.h2d else [])
    dl = _pairs([rs.dl] if rs.dl else [])
    host = _cat(
        [(r.op_s, r.op_e) for r in runs]
        + [_pairs(rs.cpu_ops), _pairs([rs.sync])]
        + ([_pairs([rs.h2d[:2]])] if rs.h2d else [])
    )
    c_n = _cat([comp, comm])
    gpu = _cat([c_n, mem])
    g_d = _cat([gpu, dl])
    all_ = _cat([g_d, host])

    def U(x) -> float:
        return union_len(x[0], x[1], lo, hi)

    compute, comm_u, cn, busy, gd = U(comp), U(comm), U(c_n), U(gpu), U(g_d)
    out = {
        "step_time": hi - lo,
        "compute": compute,
        "comm": comm_u,
        "comm_exposed": cn - compute,
        "memcpy": busy - cn,
        "gpu_busy": busy,
        "dataloader_wait": gd - busy,
        "host_idle": U(all_) - gd,
        "forward": U(_pairs([rs.fwd_ann])),
        "backward": U((rs.bwd.op_s, rs.bwd.op_e)) if rs.bwd is not None else 0,
        "optimizer": U(_pairs([rs.opt_ann])),
    }
    out["other"] = (
        out["step_time"]
        - out["compute"]
        - out["comm_exposed"]
        - out["memcpy"]
        - out["dataloader_wait"]
        - out["host_idle"]
    )
    return out
