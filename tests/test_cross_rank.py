import json

import pytest
from tracebuilder import TraceBuilder

from ddpdoctor.analysis import AnalyzeOptions, analyze
from ddpdoctor.report.json_report import ANALYSIS_SCHEMA as SCHEMA
from ddpdoctor.report.json_report import analysis_dict as to_dict


def two_rank_job(tmp_path, late_rank=1, late_by=300.0, steps=3, world=2):
    """Each step: compute 0-400 on every rank, except the late rank's compute ends late_by later;
    one all-reduce per step that ends at the same time on every rank (last arrival + 100 µs)."""
    for r in range(world):
        b = TraceBuilder(rank=r, world_size=world, pid=100 + r)
        for i in range(steps):
            t0 = 1000.0 * i
            b.step(10 + i, t0, t0 + 1000)
            compute_end = t0 + 400 + (late_by if r == late_rank else 0)
            b.kernel("gemm", t0 + 10, compute_end, launch_at=t0 + 1)
            coll_end = t0 + 400 + late_by + 100
            b.kernel(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                compute_end,
                coll_end,
                launch_at=t0 + 2,
                stream=20,
                parent="nccl:all_reduce",
            )
        b.write(tmp_path / f"rank{r}.json")
    return tmp_path


def test_sync_wait_and_transfer_split(tmp_path):
    a = analyze([str(two_rank_job(tmp_path, late_by=300))], AnalyzeOptions(jobs=1))
    s0, s1 = a.summaries
    assert s0.values["comm_sync_wait"] == pytest.approx([300.0] * 3)
    assert s1.values["comm_sync_wait"] == pytest.approx([0.0] * 3)
    assert s0.values["comm_transfer"] == pytest.approx([100.0] * 3)
    assert s1.values["comm_transfer"] == pytest.approx([100.0] * 3)
    assert a.cross.matched_collectives == 3 and a.cross.unmatched_collectives == 0


def test_late_rank_is_named_straggler_with_how_late(tmp_path):
    a = analyze([str(two_rank_job(tmp_path, late_rank=2, late_by=300, world=4))], AnalyzeOptions(jobs=1))
    assert [s.rank for s in a.cross.stragglers] == [2]
    st = a.cross.stragglers[0]
    assert st.late_us == pytest.approx(300.0) and st.steps_late == 3 and st.steps == 3
    assert a.cross.arrival_late_us[0] == pytest.approx(0.0)
    # busy = step − sync wait: the late rank is busy 1000, the others 700 → 1 − 775/1000
    assert a.cross.imbalance_score == pytest.approx(0.225)


def test_balanced_job_names_no_straggler(tmp_path):
    a = analyze([str(two_rank_job(tmp_path, late_by=0.0))], AnalyzeOptions(jobs=1))
    assert a.cross.stragglers == [] and a.cross.imbalance_score == pytest.approx(0.0)


def test_parallel_and_serial_agree(tmp_path, monkeypatch):
    import ddpdoctor.analysis as mod

    path = str(two_rank_job(tmp_path, world=4))
    serial = to_dict(analyze([path], AnalyzeOptions(jobs=1)))
    monkeypatch.setattr(mod, "IN_PROCESS_BYTES", 0)
    parallel = to_dict(analyze([path], AnalyzeOptions(jobs=2)))
    for d in (serial, parallel):
        d.pop("timing")
    assert serial == parallel


def test_json_schema(tmp_path):
    a = analyze([str(two_rank_job(tmp_path))], AnalyzeOptions(jobs=1))
    d = json.loads(json.dumps(to_dict(a), allow_nan=False))
    assert d["schema"] == SCHEMA == "ddpdoctor.analysis/1"
    assert len(d["table"]) == 6 and {"rank", "step", "us", "share"} <= set(d["table"][0])
    assert d["ranks"]["0"]["share"]["comm_sync_wait"] == pytest.approx(0.3)
    assert d["ranks"]["1"]["share"]["gpu_busy"] == pytest.approx(0.79)
    assert d["ranks"]["0"]["share"]["host_idle"] is not None
    assert d["cross_rank"]["stragglers"][0]["rank"] == 1
    # no "biggest cost" of its own: the diagnosis' ranked list of costs is the only one (issue 10)
    assert "biggest_cost" not in d
