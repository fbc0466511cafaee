"""Build small Kineto-shaped traces in code for unit tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

CATS = {
    "current": {
        "op": "cpu_op",
        "ann": "user_annotation",
        "rt": "cuda_runtime",
        "kernel": "kernel",
        "memcpy": "gpu_memcpy",
        "memset": "gpu_memset",
        "ext": "External id",
    },
    "2021": {
        "op": "Operator",
        "ann": "Operator",
        "rt": "Runtime",
        "kernel": "Kernel",
        "memcpy": "Memcpy",
        "memset": "Memset",
        "ext": "external id",
    },
}


class TraceBuilder:
    def __init__(
        self,
        rank: int | None = 0,
        world_size: int | None = 1,
        backend: str = "nccl",
        schema: str = "current",
        pid: int = 4242,
        tid: int = 4242,
    ):
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.c = CATS[schema]
        self.pid, self.tid = pid, tid
        self.events: list[dict] = []
        self._corr = 1000
        self._ext = 1
        self.base = 1_700_000_000_000.0  # µs, like real traces

    def _x(self, cat, name, start, end, pid=None, tid=None, args=None):
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid if pid is None else pid,
            "tid": self.tid if tid is None else tid,
            "ts": self.base + start,
            "dur": end - start,
        }
        if args is not None:
            ev["args"] = args
        self.events.append(ev)
        return ev

    def _next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def step(self, n: int, start: float, end: float):
        return self._x(self.c["ann"], f"ProfilerStep#{n}", start, end, args={self.c["ext"]: self._next_ext()})

    def annotation(self, name: str, start: float, end: float, tid=None):
        return self._x(self.c["ann"], name, start, end, tid=tid, args={self.c["ext"]: self._next_ext()})

    def op(self, name: str, start: float, end: float, tid=None):
        return self._x(self.c["op"], name, start, end, tid=tid, args={self.c["ext"]: self._next_ext()})

    def dataloader(self, start: float, end: float):
        return self.annotation("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", start, end)

    def kernel(
        self,
        name: str,
        start: float,
        end: float,
        launch_at: float | None = None,
        stream: int = 7,
        parent: str = "aten::mm",
        kind: str = "kernel",
        extra_args: dict | None = None,
    ):
        """A GPU op launched by a runtime call nested in a host op named ``parent``."""
        launch = start - 5 if launch_at is None else launch_at
        ext = self._next_ext()
        self._corr += 1
        self._x(self.c["op"], parent, launch - 1, launch + 3, args={self.c["ext"]: ext})
        rt_name = "cudaMemcpyAsync" if kind != "kernel" else "cudaLaunchKernel"
        self._x(self.c["rt"], rt_name, launch, launch + 2, args={self.c["ext"]: ext, "correlation": self._corr})
        args = {self.c["ext"]: ext, "correlation": self._corr, "stream": stream, "device": 0}
        args.update(extra_args or {})
        return self._x(self.c[kind], name, start, end, pid=0, tid=stream, args=args)

    def to_dict(self) -> dict:
        d: dict = {"schemaVersion": 1, "deviceProperties": [], "traceEvents": self.events}
        if self.rank is not None:
            d["distributedInfo"] = {"backend": self.backend, "rank": self.rank, "world_size": self.world_size}
        return d

    def write(self, path: Path, gz: bool = False) -> Path:
        data = json.dumps(self.to_dict()).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        return path


def gpu_step_trace(
    rank: int = 0,
    world_size: int = 1,
    schema: str = "current",
    comm_start: float = 500,
    comm_end: float = 800,
    comm_name: str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)",
    **kw,
) -> TraceBuilder:
    """One 1000 µs step with every column known exactly:

    dataloader 0–300 (GPU idle) | compute kernels 300–600 | comm 500–800 (200 exposed) |
    memcpy 800–850 | host op 850–950 with the GPU idle (host_idle 100) | nothing 950–1000 (other 50)
    """
    b = TraceBuilder(rank=rank, world_size=world_size, schema=schema, **kw)
    b.step(1, 0, 1000)
    b.dataloader(0, 300)
    b.annotation("DistributedDataParallel.forward", 300, 400)
    b.kernel("void at::native::elementwise_kernel<128, 4>(...)", 300, 450, launch_at=310)
    b.kernel("sm80_xmma_gemm_f32f32", 450, 600, launch_at=320)
    b.op("autograd::engine::evaluate_function: MmBackward0", 400, 480, tid=b.tid + 1)
    b.kernel(comm_name, comm_start, comm_end, launch_at=330, stream=20, parent="nccl:all_reduce")
    b.kernel("Memcpy HtoD (Pageable -> Device)", 800, 850, launch_at=340, kind="memcpy")
    b.annotation("Optimizer.step#SGD.step", 850, 950)
    b.op("aten::add_", 860, 940)
    return b
