"""FSDP/ZeRO collectives on synthetic GPU traces: all-gather and reduce-scatter are named, the
late rank is judged by the wait it causes (not at the step's first, tiny collective), and
collectives that run at once never add up to more wait than the step."""

import pytest
from tracebuilder import TraceBuilder

from ddpdoctor.analysis import AnalyzeOptions, analyze
from ddpdoctor.trace.classify import collective_kind, library_kinds_from_api

AG = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
RS = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def fsdp_job(tmp_path, steps=4):
    """Each 2000 µs step: a tiny all-gather at 100 where rank 0 comes 40 µs late, compute, then a
    reduce-scatter for which rank 1 (4x the work) comes 600 µs late."""
    for r in range(2):
        b = TraceBuilder(rank=r, world_size=2, pid=100 + r)
        for i in range(steps):
            t0 = 2000.0 * i
            b.step(i, t0, t0 + 2000)
            ag_start = t0 + 100 + (40 if r == 0 else 0)
            b.kernel(AG, ag_start, t0 + 160, launch_at=t0 + 90, stream=20, parent="nccl:_allgather_base")
            compute_end = t0 + 600 + (600 if r == 1 else 0)
            b.kernel("gemm", t0 + 170, compute_end, launch_at=t0 + 165)
            b.kernel(
                RS, compute_end, t0 + 1300, launch_at=compute_end - 5, stream=20, parent="nccl:_reduce_scatter_base"
            )
        b.write(tmp_path / f"rank{r}.json")
    return tmp_path


def test_nccl_kernel_names_give_all_gather_and_reduce_scatter():
    assert collective_kind(None, AG, None) == "all_gather"
    assert collective_kind(None, RS, None) == "reduce_scatter"
    assert collective_kind(None, "ncclKernel_ReduceScatter_RING_LL_Sum_half", None) == "reduce_scatter"


def test_gloo_events_take_their_kind_from_the_c10d_call():
    api = ["c10d::_allgather_base_", "c10d::_reduce_scatter_base_", "c10d::allgather_"]
    assert library_kinds_from_api(api, ["gloo:all_gather", "gloo:all_reduce", "gloo:all_gather"]) == [
        "all_gather",
        "reduce_scatter",
        "all_gather",
    ]
    # counts differ (the DDP reducer issues all-reduces from C++): no guessing
    assert library_kinds_from_api(api[:2], ["gloo:all_reduce"] * 3) is None


def test_the_rank_that_causes_the_wait_is_late_not_the_first_collectives(tmp_path):
    a = analyze([str(fsdp_job(tmp_path))], AnalyzeOptions(jobs=1))
    kinds = set(a.summaries[0].collectives.kind)
    assert kinds == {"all_gather", "reduce_scatter"}
    assert [s.rank for s in a.cross.stragglers] == [1]
    # weighted: (40 x -40 + 600 x 600) / 640 = 560 µs
    assert a.cross.arrival_late_us[1] == pytest.approx(560.0)
    s0, s1 = a.summaries
    # rank 0 waits 600 in the reduce-scatter, rank 1 waits 40 in the all-gather
    assert s0.values["comm_sync_wait"] == pytest.approx([600.0] * 4)
    assert s1.values["comm_sync_wait"] == pytest.approx([40.0] * 4)


def test_concurrent_collectives_never_wait_longer_than_the_step(tmp_path):
    """Two all-reduces on two streams run at the same time; each holds rank 0 for 700 µs while
    rank 1 computes: the wait is 700 µs, not 1400 µs."""
    for r in range(2):
        b = TraceBuilder(rank=r, world_size=2, pid=100 + r)
        for i in range(3):
            t0 = 1000.0 * i
            b.step(i, t0, t0 + 1000)
            arrive = t0 + 100 + (700 if r == 1 else 0)
            b.kernel("gemm", t0 + 10, arrive, launch_at=t0 + 5)
            for stream in (20, 21):
                b.kernel(AR, arrive, t0 + 900, launch_at=arrive - 2, stream=stream, parent="nccl:all_reduce")
        b.write(tmp_path / f"rank{r}.json")
    a = analyze([str(tmp_path)], AnalyzeOptions(jobs=1))
    s0 = a.summaries[0]
    assert s0.values["comm_sync_wait"] == pytest.approx([700.0] * 3)
    assert all(w <= t for w, t in zip(s0.values["comm_sync_wait"], s0.values["step_time"]))
    assert s0.values["comm_transfer"] == pytest.approx([100.0] * 3)
