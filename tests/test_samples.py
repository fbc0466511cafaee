"""Every bundled sample keeps the result its README row promises."""

from pathlib import Path

import pytest

from ddpdoctor.analysis import AnalyzeOptions, analyze
from ddpdoctor.synth import Truth

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def run(name):
    return analyze([str(SAMPLES / name)], AnalyzeOptions(jobs=1))


def test_gloo_sample():
    a = run("gloo_cpu_2ranks_slow_loader_straggler")
    assert [s.rank for s in a.summaries] == [0, 1] and all(s.device_kind == "cpu" for s in a.summaries)
    for s in a.summaries:
        assert a.rank_share(s)["dataloader_wait"] == pytest.approx(0.32, abs=0.05)
    assert [st.rank for st in a.cross.stragglers] == [1]
    assert a.cross.stragglers[0].late_us == pytest.approx(30_500, abs=3000)
    assert a.rank_share(a.summaries[0])["comm_exposed"] > 0.5


@pytest.mark.parametrize("name", ["synthetic_gpu_4ranks_dataloader_bound", "synthetic_gpu_8ranks_straggler_rank3"])
def test_synthetic_samples_match_their_truth(name):
    truth = Truth.load(SAMPLES / name / "truth.json")
    a = run(name)
    assert not a.warnings
    assert [s.rank for s in a.summaries] == sorted(truth.per_rank)
    for s in a.summaries:
        ours = a.rank_share(s)
        for col in ("dataloader_wait", "compute", "comm", "comm_exposed", "comm_sync_wait", "gpu_busy"):
            assert ours[col] == pytest.approx(truth.per_rank[s.rank][col], abs=0.02), (s.rank, col)
    assert [st.rank for st in a.cross.stragglers] == ([truth.straggler] if truth.straggler is not None else [])


def test_samples_stay_small():
    total = sum(p.stat().st_size for p in SAMPLES.rglob("*") if p.is_file())
    assert total < 5 * 1024 * 1024
