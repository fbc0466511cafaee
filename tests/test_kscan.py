"""The compiled column reader (trace/_kscan.c, trace/fastscan.py): the same columns, so the same
RankTrace through the one normaliser (trace/normalize.py), as the msgspec reader (trace/msgscan.py),
on fixed and on random traces; and a bail (never a different answer) on anything irregular."""

import dataclasses
import json
import mmap
import os
import shlex
import shutil

import numpy as np
import pytest

from ddpdoctor.trace import decode, fastscan, msgscan
from ddpdoctor.trace.normalize import normalize


def _compiler() -> str | None:
    cc = shlex.split(os.environ.get("CC", "cc"))
    return shutil.which(cc[0]) if cc else None


# Where a C compiler exists (CI: .ci/run) the install builds the reader, so an absent reader is a
# failure, not a skip; only a machine without a compiler skips, saying so.
pytestmark = pytest.mark.skipif(
    not fastscan.available() and _compiler() is None,
    reason="no C compiler: the C reader is not built (msgspec decodes)",
)


def test_the_reader_is_built_where_a_compiler_exists():
    assert fastscan.available(), fastscan.unavailable_reason()


def test_the_ctypes_struct_is_the_c_struct():
    assert fastscan.c_layout(fastscan._lib()) == fastscan.ctypes_layout()
    assert len(fastscan.ctypes_layout()) == 1 + len(fastscan._KScan._fields_)


def _same(a, b, where="rt"):
    assert type(a) is type(b), where
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
        if a.dtype.kind == "f":
            assert np.array_equal(np.signbit(a), np.signbit(b)), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _x(name, cat, ts, dur, pid=1, tid=1, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = args
    return ev


EVENTS = [
    _x("ProfilerStep#1", "user_annotation", 1712195495519689.047, 1000.0005),
    _x("DistributedDataParallel.forward", "user_annotation", 1712195495519690, 100),
    _x("aten::mm", "cpu_op", 1712195495519691.5, 5, **{"Input Dims": [[32, 3], []], "External id": 9}),
    _x('na"me \\ caf\u00e9 \u2603', "cpu_op", -0.0, 2, pid=1, tid="1"),
    _x("aten::add", "cpu_op", 30, -0, pid="Spans", tid="PyTorch Profiler"),
    _x("nccl:all_reduce", "user_annotation", 40, 50, **{"External id": 3}),
    _x("cudaLaunchKernel", "cuda_runtime", 41, 2, correlation=7, cbid=211, grid=[1, 2, {"a": [None, True]}]),
    _x("cudaMalloc", "cuda_runtime", 44, 2),
    _x("fused", "kernel", 45, 5, pid=0, tid=7, correlation=7, **{"External id": 3}),
    _x("fused", "kernel", 52, 1e-3, pid=0, tid=7, **{"external id": 3, "Collective name": "allgather"}),
    _x("ncclKernel_Broadcast_RING", "kernel", 60, 5.25e2, pid=0, tid=7, **{"Collective name": ""}),
    _x("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 70, 5, pid=0, tid=7, correlation=None),
    _x("Memset (Device)", "Memset", 80, 5, pid=0, tid=7),
    {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 45, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    {"name": "process_name", "ph": "M", "pid": "Spans", "tid": 0, "args": {"name": "Spans"}},
]


def _both(path, patterns=("fused",)):
    """(msgspec reader's RankTrace, C reader's RankTrace) of one file."""
    tried, fast = fastscan.scan_file(path)
    assert tried and fast is not None, "the reader bailed"
    from_c = normalize(str(path), *fast, 0, "file name", patterns)
    trace = decode.decode_trace(path, decode.read_bytes(path))
    from_msgspec = normalize(str(path), msgscan.columns(trace), trace, 0, "file name", patterns)
    return from_msgspec, from_c


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("ascii_only", [True, False])
def test_same_rank_trace_as_msgspec(tmp_path, indent, ascii_only):
    p = tmp_path / "rank0.json"
    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 2, "backend": "nccl"},
        "deviceProperties": [{"id": 0, "name": "A100"}],
        "traceEvents": EVENTS,
        "traceName": "x",
    }
    p.write_text(json.dumps(doc, indent=indent, ensure_ascii=ascii_only))
    old, new = _both(p)
    _same(old, new)
    assert [(s, json.loads(dims)) for s, dims in new.forward_inputs] == [(1712195495519690.0, [[32, 3], []])]
    assert new.host_ops.names[2] == 'na"me \\ caf\u00e9 \u2603'


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1.0, "tid": 1, "ts": 1, "dur": 1}]}',
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": 1, "args": {"correlation": "12"}}]}',
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "name": "b", "ts": 1}]}',
        '{"traceEvents": [{"ph": "X", "c\\u0061t": "cpu_op", "name": "a", "ts": 1}]}',
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "1"}]}',
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1}]',
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": "x"}]}',
        '[{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1}]',
    ],
)
def test_irregular_input_bails(tmp_path, text):
    p = tmp_path / "rank0.json"
    p.write_text(text)
    assert fastscan.scan(p.read_bytes()) is None


def test_a_file_truncated_during_the_scan_bails(tmp_path):
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps({"traceEvents": EVENTS * 2000}))
    with open(p, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    os.truncate(p, 100)  # the pages past byte 100 now raise SIGBUS
    assert fastscan.scan(m, mapped=True) is None


def test_the_library_is_built_from_the_sources_beside_it(tmp_path, monkeypatch):
    lib = fastscan._lib()
    assert lib.ks_source_id().decode() == fastscan.source_hash(fastscan.Path(fastscan.__file__).parent)
    for name in ("_kscan.c", "_kscan_lex.h"):  # an edited source: the old library is not used
        (tmp_path / name).write_bytes(b"/* edited */\n" + (fastscan.Path(fastscan.__file__).parent / name).read_bytes())
    assert fastscan.source_hash(tmp_path) != lib.ks_source_id().decode()


def test_the_reader_knows_every_field_of_the_schema():
    """A field added to trace/schema.py must be read by _kscan.c / fastscan.py and msgscan.py too."""
    import msgspec

    from ddpdoctor.trace.schema import Args, Event

    assert {f.encode_name for f in msgspec.structs.fields(Event)} == {
        "ph",
        "cat",
        "name",
        "pid",
        "tid",
        "ts",
        "dur",
        "args",
    }
    assert {f.encode_name for f in msgspec.structs.fields(Args)} == {
        "correlation",
        "External id",
        "external id",
        "Collective name",
        "In msg nelems",
        "dtype",
        "Input Dims",
    }


NAMES = (
    "ProfilerStep#%d",
    "DistributedDataParallel.forward",
    "aten::mm",
    "aten::add_",
    "Optimizer.step#SGD.step",
    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    "autograd::engine::evaluate_function: MmBackward0",
    "nccl:all_reduce",
    "gloo:broadcast",
    "record_param_comms",
    "cudaLaunchKernel",
    "cudaMalloc",
    "cudaStreamSynchronize",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "volta_sgemm_128x64_nn",
    "fused",
    "Memcpy HtoD (Pageable -> Device)",
    "Memcpy DtoH (Device -> Pinned)",
    "Memset (Device)",
    'caf\u00e9 "q"',
)
CATS = (
    "cpu_op",
    "user_annotation",
    "cuda_runtime",
    "cuda_driver",
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "Operator",
    "Runtime",
    "Kernel",
    "Memcpy",
    "Memset",
    "python_function",
    "ac2g",
)
SEEDS = int(os.environ.get("DDPDOCTOR_FUZZ_SEEDS", "40"))  # more for a longer local run


def _random_event(rng: np.random.Generator, i: int) -> dict:
    name = str(rng.choice(NAMES))
    ev = {
        "ph": str(rng.choice(["X"] * 9 + ["i", "f"])),
        "cat": str(rng.choice(CATS)),
        "name": name % i if "%d" in name else name,
        "pid": [1, 1, 1, 0, 2, "Spans", "1"][int(rng.integers(7))],
        "tid": [1, 1, 7, 3, "1", "PyTorch Profiler"][int(rng.integers(6))],
        "ts": float(rng.choice([i * 10.0, i * 10 + 0.125, 1712195495519689.047 + i])),
        "dur": float(rng.choice([5.0, 0.0, -1.0, 1e-3, 250.5])),
    }
    args = {}
    for key, values in (
        ("correlation", [None, i % 11, i]),
        ("External id", [None, i % 7, 3]),
        ("external id", [None, i % 5]),
        ("Collective name", [None, "", "allreduce", "allgather"]),
        ("In msg nelems", [None, 1024, 2.5, "1024"]),
        ("dtype", [None, "Float", "BFloat16", "Odd"]),
        ("Input Dims", [[[32, 3], []], [], [[1]]]),
        ("grid", [[1, 2, 3]]),
    ):
        if rng.random() < 0.35:
            args[key] = values[int(rng.integers(len(values)))]
    if args or rng.random() < 0.5:
        ev["args"] = args if args or rng.random() < 0.5 else None
    return ev


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_traces_give_the_same_rank_trace_from_both_readers(tmp_path, seed):
    """The differential fuzz: random traces of the schema's plain types, read by both readers."""
    rng = np.random.default_rng(seed)
    events = [_random_event(rng, i) for i in range(int(rng.integers(1, 300)))]
    events[0]["ph"] = "X"
    doc = {"traceEvents": events, "distributedInfo": {"rank": seed % 4, "world_size": 4, "backend": "nccl"}}
    p = tmp_path / "rank.json"
    p.write_text(json.dumps(doc, indent=None if seed % 2 else 1, ensure_ascii=bool(seed % 3)))
    from_msgspec, from_c = _both(p, ("fused",) if seed % 2 else ())
    _same(from_msgspec, from_c)


def test_a_stale_or_broken_library_first_on_the_path_is_passed_over(tmp_path, monkeypatch):
    good = next(p for p in fastscan._candidates() if p.is_file() and fastscan._open(p)[0] is not None)
    broken = tmp_path / "_kscan.so"
    broken.write_bytes(b"not a library")
    monkeypatch.setattr(fastscan, "_candidates", lambda: [broken, good])
    assert fastscan._load()[0] is not None
    monkeypatch.setattr(fastscan, "_candidates", lambda: [broken])
    lib, why = fastscan._load()
    assert lib is None and why.startswith("the C reader cannot be loaded")


def test_forward_inputs_skip_ddps_buffer_broadcast(tmp_path):
    """DDP's forward first flattens and broadcasts the BatchNorm buffers: the batch is the first op whose
    first input is one tensor of 2+ dimensions, in both readers."""
    t0 = 1712195495519000.0
    events = [
        _x("ProfilerStep#1", "user_annotation", t0, 1000),
        _x("DistributedDataParallel.forward", "user_annotation", t0 + 10, 500),
        _x("aten::flatten_dense_tensors", "cpu_op", t0 + 11, 5, **{"Input Dims": [[[32], [32], [32]]]}),
        _x("c10d::broadcast_", "cpu_op", t0 + 20, 5, **{"Input Dims": [[[96]], [], []]}),
        _x("aten::copy_", "cpu_op", t0 + 30, 2, **{"Input Dims": [[32], [32], []]}),
        _x("aten::conv2d", "cpu_op", t0 + 40, 50, **{"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3], [16]]}),
        _x("ProfilerStep#2", "user_annotation", t0 + 1000, 1000),
        _x("DistributedDataParallel.forward", "user_annotation", t0 + 1010, 500),
        _x("aten::view", "cpu_op", t0 + 1011, 2, **{"Input Dims": [[32], []]}),  # no op takes a batch: the first
    ]
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": events}))
    old, new = _both(p)
    _same(old, new)
    assert [json.loads(d) for _, d in new.forward_inputs] == [[[8, 3, 32, 32], [16, 3, 3, 3], [16]], [[32], []]]
