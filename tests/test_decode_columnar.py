"""The one columnar normaliser (trace/normalize.py) fed by either reader (the compiled reader,
trace/fastscan.py, and msgspec's, trace/msgscan.py): edge cases both must keep. Every test that loads
a trace runs once per reader, as pyinstrument runs its C and Python implementations."""

import json

import pytest

from ddpdoctor.errors import InputError
from ddpdoctor.trace import decode, fastscan
from ddpdoctor.trace.decode import GpuOps


@pytest.fixture(params=["C reader", "msgspec"])
def reader(request, monkeypatch):
    """The reader the test's loads use (the C one fails where it is not built: see test_kscan.py)."""
    if request.param == "msgspec":
        monkeypatch.setattr(fastscan, "_lib_cache", [None])
    elif not fastscan.available():
        pytest.skip(f"the C reader is not used here: {fastscan.unavailable_reason()}")
    return request.param


def load_rank_trace(path, reader: str, **kw):
    rt = decode.load_rank_trace(path, **kw)
    assert rt.decoder.startswith(reader), rt.decoder
    return rt


def _x(name, cat, ts, dur, pid=1, tid=1, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = args
    return ev


def _write(tmp_path, events, name="rank0.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_string_ids_that_spell_the_main_thread_are_another_thread(tmp_path, reader):
    p = _write(
        tmp_path,
        [
            _x("ProfilerStep#1", "user_annotation", 0, 100),
            _x("aten::mm", "cpu_op", 10, 5),
            _x("aten::add", "cpu_op", 20, 5, pid=1, tid="1"),
            _x("aten::sub", "cpu_op", 30, 5, pid="1", tid=1),
        ],
    )
    rt = load_rank_trace(p, reader)
    assert rt.main_ops.names == ["aten::mm"]
    assert rt.host_ops.names == ["aten::mm", "aten::add"]  # the pid "1" op is another process


def test_mixed_and_missing_correlations(tmp_path):
    p = _write(
        tmp_path,
        [
            _x("ProfilerStep#1", "user_annotation", 0, 100),
            _x("cudaLaunchKernel", "cuda_runtime", 5, 2, correlation=7),
            _x("cudaLaunchKernel", "cuda_runtime", 8, 2, correlation="x"),
            _x("cudaLaunchKernel", "cuda_runtime", 11, 2),
            _x("k1", "kernel", 10, 5, pid=0, tid=7, correlation=7),
            _x("k2", "kernel", 20, 5, pid=0, tid=7, correlation="12"),
            _x("k3", "kernel", 30, 0, pid=0, tid=7),
        ],
    )
    rt = decode.load_rank_trace(p)  # string correlations: the msgspec reader
    assert rt.decoder.startswith("msgspec")
    assert rt.runtime_corr.tolist() == [7]
    assert rt.runtime_launch.start.tolist() == [5.0] and rt.runtime_launch.end.tolist() == [7.0]
    assert rt.gpu.correlation.tolist() == [7, 12, -1]
    assert rt.gpu.end.tolist() == [15.0, 25.0, 30.0]  # no positive duration: ends where it starts


def test_kernel_kinds_from_args_parent_and_name(tmp_path, reader):
    p = _write(
        tmp_path,
        [
            _x("ProfilerStep#1", "user_annotation", 0, 100),
            _x("nccl:all_reduce", "user_annotation", 1, 50, **{"External id": 3}),
            _x("fused", "kernel", 10, 5, pid=0, tid=7, **{"External id": 3}),
            _x("fused", "kernel", 20, 5, pid=0, tid=7, **{"Collective name": "allgather"}),
            _x("ncclKernel_Broadcast_RING", "kernel", 30, 5, pid=0, tid=7),
            _x("volta_h884gemm_nhwc", "kernel", 40, 5, pid=0, tid=7),
            _x("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 50, 5, pid=0, tid=7),
            _x("Memset (Device)", "gpu_memset", 60, 5, pid=0, tid=7),
        ],
    )
    gpu = load_rank_trace(p, reader).gpu
    assert gpu.kind.tolist() == [GpuOps.COMM] * 3 + [GpuOps.KERNEL, GpuOps.MEMCPY, GpuOps.MEMSET]
    assert gpu.comm_kind == ["all_reduce", "all_gather", "broadcast", "", "", ""]
    assert gpu.pageable_h2d.tolist() == [False] * 4 + [True, False]
    assert gpu.traits.tolist()[3] != 0 and gpu.traits.tolist()[:3] == [0, 0, 0]


def test_local_read_is_the_file_and_keeps_the_size_limit(tmp_path, monkeypatch):
    p = _write(tmp_path, [_x("ProfilerStep#1", "user_annotation", 0, 100)])
    assert bytes(decode.read_bytes(p)) == p.read_bytes()
    monkeypatch.setenv("DDPDOCTOR_MAX_TRACE_BYTES", "10")
    with pytest.raises(InputError, match="larger than the limit of 10 bytes"):
        decode.read_bytes(p)


def test_huge_and_string_ids_keep_python_equality(tmp_path):
    """Ids beyond int64 and strings that spell an int are ids of their own (the msgspec reader: the C one
    does not take them)."""
    big = 1 << 70
    p = _write(
        tmp_path,
        [
            _x("ProfilerStep#1", "user_annotation", 0, 100, pid=big, tid=big),
            _x("aten::mm", "cpu_op", 10, 5, pid=big, tid=big),
            _x("aten::add", "cpu_op", 20, 5, pid=big, tid=str(big)),
            _x("aten::sub", "cpu_op", 30, 5, pid=1, tid=big),
            _x("nccl:all_reduce", "user_annotation", 40, 5, pid=big, tid=big, **{"External id": "e1"}),
            _x("fused", "kernel", 50, 5, pid=0, tid=7, **{"External id": "e1"}),
            _x("fused", "kernel", 60, 5, pid=0, tid=7, **{"External id": big}),
            _x("cudaLaunchKernel", "cuda_runtime", 45, 2, pid=big, tid=big, correlation=big),
        ],
    )
    rt = decode.load_rank_trace(p)
    assert rt.decoder.startswith("msgspec")
    assert rt.main_tid == big and rt.pid == big
    assert rt.main_ops.names == ["aten::mm"]
    assert rt.host_ops.names == ["aten::mm", "aten::add", "nccl:all_reduce", "cudaLaunchKernel"]
    assert rt.gpu.kind.tolist() == [GpuOps.COMM, GpuOps.KERNEL] and rt.gpu.comm_kind == ["all_reduce", ""]
    assert rt.runtime_corr.tolist() == []  # a correlation beyond int64 is no correlation
