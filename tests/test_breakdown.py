import pytest
from tracebuilder import TraceBuilder, gpu_step_trace

from ddpdoctor.metrics.breakdown import summarize
from ddpdoctor.metrics.columns import PARTITION_GPU
from ddpdoctor.trace.decode import load_rank_trace

EXPECTED = {
    "step_time": 1000,
    "dataloader_wait": 300,
    "compute": 300,
    "comm": 300,
    "comm_exposed": 200,
    "memcpy": 50,
    "gpu_busy": 550,
    "host_idle": 100,
    "other": 50,
    "forward": 100,
    "backward": 80,
    "optimizer": 100,
}


def summary_of(builder, tmp_path, name="rank0.json", **kw):
    path = builder.write(tmp_path / name, gz=kw.pop("gz", False))
    rt = load_rank_trace(path, **kw)
    return summarize(rt, rt.rank if rt.rank is not None else 0)


@pytest.mark.parametrize("schema", ["current", "2021"])
@pytest.mark.parametrize("gz", [False, True])
def test_every_column_of_a_known_gpu_step(tmp_path, schema, gz):
    s = summary_of(gpu_step_trace(schema=schema), tmp_path, gz=gz)
    assert s.device_kind == "gpu" and s.step_source == "ProfilerStep"
    for col, want in EXPECTED.items():
        assert s.values[col][0] == pytest.approx(want, abs=1e-6), col
    assert sum(s.values[c][0] for c in PARTITION_GPU) == pytest.approx(1000)
    assert s.values["comm_sync_wait"] == [None] and s.values["comm_transfer"] == [None]
    assert s.collectives.kind == ["all_reduce"]


@pytest.mark.parametrize(
    "name,extra,parent",
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", None, "aten::mm"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", None, "aten::mm"),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", None, "nccl:all_reduce"),  # RCCL on ROCm
        ("void dpsk::ep::internode::dispatch<false, 8>(int)", None, "aten::mm"),  # DeepEP
        ("my_fused_kernel", {"Collective name": "allreduce"}, "aten::mm"),  # marked by args
        ("my_fused_kernel", None, "record_param_comms"),  # marked by parent op
        ("rcclKernel_Broadcast", None, "aten::mm"),
    ],
)
def test_communication_kernels_are_recognized(tmp_path, name, extra, parent):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.kernel(name, 10, 60, launch_at=2, stream=20, parent=parent, extra_args=extra)
    s = summary_of(b, tmp_path)
    assert s.values["comm"][0] == pytest.approx(50) and s.values["compute"][0] == 0
    assert s.comm_source == "kernels"


def test_user_pattern_marks_custom_comm_kernels(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.kernel("two_shot_all_reduce_kernel", 10, 60, launch_at=2)
    path = b.write(tmp_path / "rank0.json")
    assert summarize(load_rank_trace(path), 0).values["comm"][0] == 0
    s = summarize(load_rank_trace(path, comm_patterns=(r"two_shot",)), 0)
    assert s.values["comm"][0] == pytest.approx(50)


def test_step_extends_to_gpu_work_it_launched(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.step(2, 100, 200)
    b.kernel("gemm", 90, 150, launch_at=50)  # launched in step 1, runs past its host end
    b.kernel("gemm", 150, 180, launch_at=120)
    s = summary_of(b, tmp_path)
    assert [(w.start, w.end) for w in s.steps] == [(b.base, b.base + 150), (b.base + 150, b.base + 200)]


def test_no_profiler_step_falls_back_to_optimizer_steps_then_span(tmp_path):
    b = TraceBuilder()
    for i in range(3):
        b.annotation("Optimizer.step#SGD.step", 100 * i + 80, 100 * i + 100)
        b.kernel("gemm", 100 * i + 10, 100 * i + 70)
    s = summary_of(b, tmp_path)
    assert s.step_source == "optimizer steps" and len(s.steps) == 2
    assert any("Optimizer.step" in n for n in s.notes)
    b2 = TraceBuilder()
    b2.kernel("gemm", 10, 70)
    s2 = summary_of(b2, tmp_path, name="x.json")
    assert s2.step_source == "activity span" and len(s2.steps) == 1
    assert any("span of activity" in n for n in s2.notes)


def test_cpu_gloo_trace_fills_host_columns_and_leaves_gpu_columns_empty(tmp_path):
    b = TraceBuilder(backend="gloo", world_size=2)
    b.step(1, 0, 1000)
    b.dataloader(0, 200)
    b.op("aten::linear", 200, 500)  # forward compute on the training thread
    b.op("autograd::engine::evaluate_function: AddmmBackward0", 500, 700)
    b.annotation("gloo:all_reduce", 600, 900, tid=b.tid + 7)  # on gloo's worker thread
    b.op("aten::add_", 900, 950)  # optimizer after the training thread waited 700-900
    s = summary_of(b, tmp_path)
    assert s.device_kind == "cpu" and s.comm_source == "host annotations"
    v = {k: x[0] for k, x in s.values.items()}
    assert v["gpu_busy"] is None and v["memcpy"] is None and v["host_idle"] is None
    assert v["dataloader_wait"] == pytest.approx(200)
    assert v["compute"] == pytest.approx(550)
    assert v["comm"] == pytest.approx(300)
    assert v["comm_exposed"] == pytest.approx(200)  # 700-900: the training thread is blocked
    assert v["other"] == pytest.approx(50)
    assert s.collectives.kind == ["all_reduce"]


def test_odd_field_types_take_the_lenient_path(tmp_path):
    d = gpu_step_trace().to_dict()
    for ev in d["traceEvents"]:
        if ev.get("cat") == "kernel":
            ev["args"]["stream"] = 7.0  # a float where every real trace has an int
            ev["args"]["grid"] = {"odd": True}
    d["traceEvents"].append(
        {"ph": "X", "cat": "cpu_op", "name": "weird", "pid": 4242, "tid": 4242, "ts": "not-a-number", "dur": None}
    )
    import json

    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(d))
    s = summarize(load_rank_trace(p), 0)
    assert s.values["compute"][0] == pytest.approx(300) and s.values["dataloader_wait"][0] == pytest.approx(300)


def test_bare_event_array_is_read(tmp_path):
    import json

    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(gpu_step_trace().events))
    s = summarize(load_rank_trace(p, rank_hint=0), 0)
    assert s.values["comm_exposed"][0] == pytest.approx(200)


def test_step_table_dataframe(tmp_path):
    from ddpdoctor.analysis import AnalyzeOptions, analyze

    for r in range(2):
        gpu_step_trace(rank=r, world_size=2, pid=10 + r).write(tmp_path / f"rank{r}.json")
    df = analyze([str(tmp_path)], AnalyzeOptions(jobs=1)).table()
    assert len(df) == 2 and list(df["rank"]) == [0, 1]
    assert df.loc[0, "dataloader_wait"] == pytest.approx(300) and df.loc[1, "comm_sync_wait"] == pytest.approx(0)


def test_allreduce_message_sizes_come_from_the_collective_records(tmp_path):
    """record_param_comms carries 'In msg nelems' and 'dtype': bytes and records per step, counted in the
    host's steps (the synthetic writer puts them on the backward thread, inside each ProfilerStep)."""
    from ddpdoctor_synth import Scenario, generate

    generate(Scenario(world_size=2, steps=3, buckets=5, bucket_kb=16.0), tmp_path, gzip=False)
    rt = load_rank_trace(tmp_path / "rank0.pt.trace.json")
    assert len(rt.coll_messages) == 15 and set(rt.coll_messages.kind) == {"all_reduce"}
    ex = summarize(rt, 0).extras
    assert ex["allreduce_msgs_per_step"] == 5 and ex["allreduce_bytes_per_step"] == 5 * 16_000
    assert ex["allreduce_elem_bytes"] == 4  # "dtype": "Float"


def test_a_record_without_a_known_dtype_or_size_is_left_out(tmp_path):
    from ddpdoctor.trace.messages import message_bytes

    assert message_bytes(1000, "BFloat16") == 2000 and message_bytes("1000", "Float") == 4000
    assert message_bytes(1000, "NewDtype") is None and message_bytes("many", "Float") is None
    assert message_bytes(-1, "Float") is None and message_bytes(None, "Float") is None


def test_real_bf16_ddp_trace_gets_sized_buckets_and_no_16_bit_hook(real_traces):
    """TraceLens's 8xMI300X DDP ResNet (rank 0 only, no run settings): two all-reduces of 5.7 and 17.6 MB of
    BFloat16 per step. CM001 sizes the buckets from them instead of 'not recorded for this run', and does
    not offer bf16 compression for gradients that already travel in 16 bits."""
    from ddpdoctor.analysis import AnalyzeOptions
    from ddpdoctor.diagnosis import AnalysisContext, run_analyze
    from ddpdoctor.rules_engine.registry import build_ruleset

    r = run_analyze(
        [str(real_traces / "tracelens_ddp_resnet_actckpt_8xMI300X_rank0")],
        AnalyzeOptions(jobs=1, hta="off"),
        AnalysisContext.of(build_ruleset(use_config=False)),
    )
    ex = r.analysis.summaries[0].extras
    assert ex["allreduce_bytes_per_step"] == pytest.approx(23_379_024) and ex["allreduce_msgs_per_step"] == 2
    assert ex["allreduce_elem_bytes"] == 2
    cm = next(f for f in r.diagnosis.findings if f.rule == "CM001")
    titles = [f.title for f in cm.fixes]
    assert titles[0] == "Use smaller gradient buckets so all-reduce starts earlier in backward", titles
    assert "bucket_cap_mb=4" in cm.fixes[0].change and "23.4 MB of gradients" in cm.fixes[0].change
    assert not any("compress" in t.lower() and "16 bits" in t for t in titles), titles
    assert not any("not recorded for this run" in t for t in titles), titles


@pytest.mark.parametrize("reader", ["default", "msgspec"])
def test_a_new_epochs_iterator_is_dataloader_wait_not_unexplained(tmp_path, monkeypatch, reader):
    """`ddpdoctor run` spans iter(loader) (old workers shut down, new ones start): a step that ends one
    epoch and starts the next waits for the loader from the closing next() to the first batch."""
    if reader == "msgspec":
        from ddpdoctor.trace import fastscan

        monkeypatch.setattr(fastscan, "_lib_cache", [None])
    b = TraceBuilder(backend="gloo", world_size=2)
    b.step(1, 0, 1000)
    b.dataloader(0, 150)  # next(): StopIteration, workers shut down
    b.annotation("enumerate(DataLoader)#DataLoader.__iter__", 150, 400)  # new workers start
    b.dataloader(400, 700)  # the new epoch's first batch
    b.op("aten::linear", 700, 950)
    s = summary_of(b, tmp_path)
    v = {k: x[0] for k, x in s.values.items()}
    assert v["dataloader_wait"] == pytest.approx(700)
    assert v["other"] == pytest.approx(50)
