"""Stream one rank's laid-out steps as a Kineto (torch.profiler 2.x) Chrome-trace JSON file.

Events are formatted straight into strings (Kineto's own line layout) and written one step
at a time into a buffered (optionally gzip) file: nothing holds the whole trace.
"""

from __future__ import annotations

import gzip as _gzip
import json
from pathlib import Path

import numpy as np

from .scenario import Scenario
from .timeline import RankStep, Run

BASE_TIME_NS = 1_700_000_000_000_000_000
GPU_NAME = "NVIDIA A100-SXM4-80GB"
COMPUTE_STREAM, NCCL_STREAM = 7, 20
GPU_PID = 0
DATALOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
MEMCPY = "Memcpy HtoD (Pinned -> Device)"

_EW = "void at::native::vectorized_elementwise_kernel<4, "
_ADD = (
    _EW + "at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"
    "(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
)
_MTA = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor"
    "<float, 2, 2, 0>, std::{op}<float>, float>(at::native::(anonymous namespace)::TensorListMetadata"
    "<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::{op}"
    "<float>, float)"
)
# (host op chain, outermost first; kernel name; grid; block)
FORWARD = [
    (
        ("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution"),
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_"
        "stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel__5x_cudnn",
        (392, 1, 1),
        (128, 1, 1),
    ),
    (
        ("aten::batch_norm", "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm"),
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, "
        "float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, "
        "float*, float*, float*, float, float)",
        (64, 4, 1),
        (512, 1, 1),
    ),
    (
        ("aten::relu_", "aten::clamp_min_"),
        _EW + "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
        "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() "
        "const::{lambda()#8}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >"
        "(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
        "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() "
        "const::{lambda()#8}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)",
        (1568, 1, 1),
        (128, 1, 1),
    ),
    (("aten::linear", "aten::addmm"), "ampere_sgemm_128x64_tn", (8, 16, 1), (128, 1, 1)),
    (("aten::add",), _ADD, (784, 1, 1), (128, 1, 1)),
]
BACKWARD = [
    (
        (
            "autograd::engine::evaluate_function: ConvolutionBackward0",
            "ConvolutionBackward0",
            "aten::convolution_backward",
        ),
        "sm80_xmma_dgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize64x64x64_"
        "stage4_warpsize2x2x1_g1_tensor16x8x8_kernel__5x_cudnn",
        (196, 2, 1),
        (128, 1, 1),
    ),
    (
        (
            "autograd::engine::evaluate_function: CudnnBatchNormBackward0",
            "CudnnBatchNormBackward0",
            "aten::cudnn_batch_norm_backward",
        ),
        "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float, "
        "float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, "
        "float*, float const*, float*, float*, float const*, float const*, float)",
        (64, 4, 1),
        (512, 1, 1),
    ),
    (
        ("autograd::engine::evaluate_function: ReluBackward0", "ReluBackward0", "aten::threshold_backward"),
        _EW + "at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, "
        "float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, at::native::"
        "(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::"
        "{lambda(float, float)#1}, at::detail::Array<char*, 3>)",
        (1568, 1, 1),
        (128, 1, 1),
    ),
    (
        ("autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", "aten::mm"),
        "ampere_sgemm_64x32_sliced1x4_nn",
        (16, 8, 1),
        (128, 1, 1),
    ),
]
ACCUMULATE = (
    (
        "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
        "torch::autograd::AccumulateGrad",
        "aten::add_",
    ),
    _ADD,
    (784, 1, 1),
    (128, 1, 1),
)
OPTIMIZER = [
    (("aten::_foreach_add_",), _MTA.format(op="plus"), (320, 1, 1), (512, 1, 1)),
    (("aten::_foreach_mul_",), _MTA.format(op="multiplies"), (320, 1, 1), (512, 1, 1)),
]
H2D_CHAIN = ("aten::to", "aten::_to_copy", "aten::copy_")
CPU_ONLY = ["aten::cat", "aten::stack", "aten::index_select", "aten::copy_", "aten::sum", "aten::empty"]
FILLER = [
    "aten::empty",
    "aten::as_strided",
    "aten::view",
    "aten::t",
    "aten::transpose",
    "aten::expand",
    "aten::resolve_conj",
    "aten::resolve_neg",
]


def _kernel_tail(grid, block) -> str:
    return (
        f',\n      "registers per thread": 32,\n      "shared memory": 0,\n      "blocks per SM": 0.5,'
        f'\n      "warps per SM": 2.0,\n      "grid": [{grid[0]}, {grid[1]}, {grid[2]}],'
        f'\n      "block": [{block[0]}, {block[1]}, {block[2]}],\n      "est. achieved occupancy %": 0'
    )


def _prep(templates):
    return [(chain, name, _kernel_tail(g, b)) for chain, name, g, b in templates]


_FWD, _BWD, _OPT = _prep(FORWARD), _prep(BACKWARD), _prep(OPTIMIZER)
_ACC = _prep([ACCUMULATE])[0]


def _complete(cat: str, name: str, pid: int, tid: int, s: int, d: int, args: str) -> str:
    """One complete ("X") event as Kineto writes it; times in integer ns, printed as µs."""
    return (
        f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},'
        f'\n    "ts": {s // 1000}.{s % 1000:03d}, "dur": {d // 1000}.{d % 1000:03d},\n    "args": {{'
        f"\n      {args}\n    }}\n  }},\n"
    )


class RankTraceWriter:
    """Writes one rank's trace file, one :class:`RankStep` at a time."""

    def __init__(
        self,
        path: Path | None,
        sc: Scenario,
        rank: int,
        h: int,
        gzip: bool = False,
        compresslevel: int = 1,
        id_offset: int = 0,
    ):
        self.sc, self.rank, self.h = sc, rank, h
        self.pid = 1000 + rank
        self.tid_main = self.pid
        self.tid_bwd = 11000 + rank
        self.filler = sc.filler_cpu_ops_per_kernel
        self.ext = self.corr = self.ev = id_offset
        self.seq = id_offset
        self.path = path
        self.bytes = 0
        self.buf: list[str] = []
        ranks = ", ".join(str(r) for r in range(sc.world_size))
        self.ranks_str = f"[{ranks}]"
        self.first_ts: int | None = None
        self.last_ts = 0
        self.skew = sc.skew_ns(rank)  # this rank's host clock minus the true time (ns)
        self.host = sc.host_of(rank)
        if path is None:
            self.fh = None
        elif gzip:
            self.fh = _gzip.open(path, "wb", compresslevel=compresslevel)
        else:
            self.fh = open(path, "wb", buffering=1 << 20)  # closed by close()

    # ------------------------------------------------------------------ output
    def _flush(self) -> None:
        data = "".join(self.buf).encode()
        self.buf.clear()
        self.bytes += len(data)
        if self.fh is not None:
            self.fh.write(data)

    def header(self) -> None:
        sc = self.sc
        dev = {
            "id": 0,
            "name": GPU_NAME,
            "totalGlobalMem": 85899345920,
            "computeMajor": 8,
            "computeMinor": 0,
            "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048,
            "regsPerBlock": 65536,
            "regsPerMultiprocessor": 65536,
            "warpSize": 32,
            "sharedMemPerBlock": 49152,
            "sharedMemPerMultiprocessor": 167936,
            "numSms": 108,
            "sharedMemPerBlockOptin": 166912,
        }
        dist = {
            "backend": "nccl",
            "rank": self.rank,
            "world_size": sc.world_size,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": sc.world_size,
                    "ranks": list(range(sc.world_size)),
                }
            ],
            "nccl_version": "2.21.5",
        }
        self.buf.append(
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    '
            + json.dumps(dev)
            + '\n  ],\n  "distributedInfo": '
            + json.dumps(dist)
            + (f',\n  "host_name": {json.dumps(self.host)}' if self.host else "")
            + ',\n  "record_shapes": 0,\n  "with_stack": 0,\n  "profile_memory": 0,'
            '\n  "cuda_runtime_version": 12040,\n  "cuda_driver_version": 12040,'
            '\n  "traceEvents": [\n'
        )
        pid = self.pid
        for name, p, tid, arg in (
            ("process_name", pid, 0, '"name": "python"'),
            ("process_labels", pid, 0, '"labels": "CPU"'),
            ("thread_name", pid, self.tid_main, f'"name": "thread {self.tid_main} (python)"'),
            ("thread_name", pid, self.tid_bwd, f'"name": "thread {self.tid_bwd} (pt_autograd_0)"'),
            ("process_name", GPU_PID, 0, '"name": "GPU 0"'),
            ("process_labels", GPU_PID, 0, f'"labels": "{GPU_NAME}"'),
            ("thread_name", GPU_PID, COMPUTE_STREAM, f'"name": "stream {COMPUTE_STREAM} "'),
            ("thread_name", GPU_PID, NCCL_STREAM, f'"name": "stream {NCCL_STREAM} "'),
            ("process_name", '"Spans"', 0, '"name": "Spans"'),
        ):
            self.buf.append(
                f'  {{\n    "name": "{name}", "ph": "M", "ts": 0.000, "pid": {p}, "tid": {tid},'
                f'\n    "args": {{\n      {arg}\n    }}\n  }},\n'
            )

    def footer(self) -> None:
        s = (self.first_ts or 0) - 100_000
        e = self.last_ts + 100_000
        d = e - s
        self.buf.append(
            f'  {{\n    "ph": "X", "cat": "Trace", "ts": {s // 1000}.{s % 1000:03d}, '
            f'"dur": {d // 1000}.{d % 1000:03d},\n    "pid": "Spans", "tid": "PyTorch Profiler",'
            f'\n    "name": "PyTorch Profiler (0)",\n    "args": {{\n      "Op count": 0\n    }}\n  }}\n'
        )
        self.buf.append(
            '  ],\n  "traceName": '
            + json.dumps(str(self.path or ""))
            + f',\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {BASE_TIME_NS}\n}}\n'
        )
        self._flush()

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    # ------------------------------------------------------------------ events
    def op(self, cat: str, name: str, tid: int, s: int, e: int, extra: str = "") -> int:
        self.ext += 1
        self.ev += 1
        d = e - s
        s += self.skew
        self.buf.append(
            _complete(
                cat,
                name,
                self.pid,
                tid,
                s,
                d,
                f'"External id": {self.ext},"Record function id": 0, "Ev Idx": {self.ev}{extra}',
            )
        )
        return self.ext

    def launch(
        self,
        tid: int,
        ext: int,
        ls: int,
        le: int,
        gs: int,
        gd: int,
        name: str,
        tail: str,
        stream: int = COMPUTE_STREAM,
        gcat: str = "kernel",
        rt: str = "cudaLaunchKernel",
        cbid: int = 211,
    ) -> None:
        """A runtime call [ls, le) launching GPU activity [gs, gs + gd), plus its flow arrows."""
        self.corr += 1
        c, pid, rd = self.corr, self.pid, le - ls
        ls, gs = ls + self.skew, gs + self.skew
        self.buf.append(
            _complete(
                "cuda_runtime", rt, pid, tid, ls, rd, f'"External id": {ext},\n      "cbid": {cbid}, "correlation": {c}'
            )
            + f'  {{\n    "ph": "s", "id": {c}, "pid": {pid}, "tid": {tid}, "ts": {ls // 1000}.{ls % 1000:03d},'
            f'\n    "cat": "ac2g", "name": "ac2g"\n  }},\n'
            + _complete(
                gcat,
                name,
                GPU_PID,
                stream,
                gs,
                gd,
                f'"External id": {ext},\n      "queued": 0, "device": 0, "context": 1,'
                f'\n      "stream": {stream}, "correlation": {c}{tail}',
            )
            + f'  {{\n    "ph": "f", "id": {c}, "pid": {GPU_PID}, "tid": {stream}, "ts": {gs // 1000}.{gs % 1000:03d},'
            f'\n    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }},\n'
        )

    def chain_launch(self, tid: int, chain, op_s: int, op_e: int, gs: int, gd: int, name: str, tail: str, **kw) -> None:
        """Nested host ops (outer op spans [op_s, op_e)), filler ops, runtime call, GPU activity."""
        h = self.h
        q = h // 4
        ext = 0
        for i, opname in enumerate(chain):
            ext = self.op("cpu_op", opname, tid, op_s + i * q, op_e if i == 0 else gs + h - i * q)
        k = self.filler
        if k:
            fs = op_s + (len(chain) - 1) * q + 1
            w = (gs - h - 1 - fs) // k
            if w >= 2:
                for i in range(k):
                    a = fs + i * w
                    self.op("cpu_op", FILLER[i % 8], tid, a, a + w - w // 4)
        self.launch(tid, ext, gs - h, gs - h // 5, gs, gd, name, tail, **kw)

    def run(self, tid: int, run: Run, templates, special: dict | None = None) -> None:
        gs, d, op_s, op_e = run.gs.tolist(), run.d.tolist(), run.op_s.tolist(), run.op_e.tolist()
        nt = len(templates)
        for i in range(len(gs)):
            chain, name, tail = _ACC if special and i in special else templates[(i * 7 + i // nt) % nt]
            self.chain_launch(tid, chain, op_s[i], op_e[i], gs[i], d[i], name, tail)
            if special and i in special:
                yield i

    # ------------------------------------------------------------------ a step
    def step(self, rs: RankStep, step_number: int, bucket_nelems: list[int]) -> None:
        main, bwd = self.tid_main, self.tid_bwd
        if self.first_ts is None:
            self.first_ts = rs.S + self.skew
        self.last_ts = max(self.last_ts, rs.E + self.skew)
        self.op("user_annotation", f"ProfilerStep#{step_number}", main, rs.S, rs.E)
        if rs.dl:
            self.op("user_annotation", DATALOADER, main, *rs.dl)
        if rs.h2d:
            s, e, gs, gd = rs.h2d
            tail = f',\n      "bytes": {gd * 20},\n      "memory bandwidth (GB/s)": 20.0'
            self.chain_launch(
                main, H2D_CHAIN, s, e, gs, gd, MEMCPY, tail, gcat="gpu_memcpy", rt="cudaMemcpyAsync", cbid=41
            )
        self.op("user_annotation", "DistributedDataParallel.forward", main, *rs.fwd_ann)
        if rs.fwd is not None:
            for _ in self.run(main, rs.fwd, _FWD):
                pass
        for i, (s, e) in enumerate(rs.cpu_ops):
            if (s, e) == rs.opt_ann:
                continue  # written inside Optimizer.step below
            self.op("cpu_op", CPU_ONLY[i % len(CPU_ONLY)], main, s, e)
        if rs.bwd is not None:
            for p in self.run(bwd, rs.bwd, _BWD, rs.bwd_launch):
                for j in rs.bwd_launch[p]:
                    self._allreduce(rs, j, bucket_nelems[j])
        self.op("user_annotation", "Optimizer.step#SGD.step", main, *rs.opt_ann)
        if rs.opt is not None:
            for _ in self.run(main, rs.opt, _OPT):
                pass
        else:
            self.op("cpu_op", "aten::_foreach_add_", main, *rs.opt_ann)
        self.op("user_annotation", "Optimizer.zero_grad#SGD.zero_grad", main, *rs.zero_grad)
        s, e = rs.sync
        self.corr += 1
        d = e - s
        s += self.skew
        self.buf.append(
            _complete(
                "cuda_runtime",
                "cudaDeviceSynchronize",
                self.pid,
                main,
                s,
                d,
                f'"External id": 0,\n      "cbid": 165, "correlation": {self.corr}',
            )
        )
        self._flush()

    def _allreduce(self, rs: RankStep, j: int, nelems: int) -> None:
        s0, s1 = rs.nccl_slot[j]
        gs, ge = rs.nccl[j]
        if self.sc.end_jitter_us > 0:  # timestamp noise: ranks never record exactly the same end
            rng = np.random.default_rng([self.sc.seed, self.rank, rs.step, j, 7])
            ge = max(gs + 1, ge + int(round(rng.normal(0.0, self.sc.end_jitter_us * 1000.0))))
        q = (s1 - s0) // 6
        self.seq += 1
        W = self.sc.world_size
        coll = (
            f',\n      "Collective name": "allreduce", "In msg nelems": {nelems}, "Out msg nelems": {nelems},'
            f'\n      "Group size": {W}, "dtype": "Float", "In split size": "[]", "Out split size": "[]",'
            f'\n      "Process Group Name": "0", "Process Group Description": "default_pg",'
            f'\n      "Process Group Ranks": "{self.ranks_str}"'
        )
        self.op("user_annotation", "nccl:all_reduce", self.tid_bwd, s0, s1)
        ext = self.op(
            "cpu_op",
            "record_param_comms",
            self.tid_bwd,
            s0 + q,
            s1 - q,
            f', "Rank": {self.rank}, "Seq": {self.seq}' + coll,
        )
        tail = (
            f',\n      "registers per thread": 96,\n      "shared memory": 0,\n      "blocks per SM": 0.25,'
            f'\n      "warps per SM": 5.0,\n      "grid": [{2 * W}, 1, 1],\n      "block": [640, 1, 1],'
            f'\n      "est. achieved occupancy %": 0' + coll
        )
        self.launch(self.tid_bwd, ext, s0 + 2 * q, s1 - 2 * q, gs, ge - gs, NCCL_KERNEL, tail, stream=NCCL_STREAM)
