"""Synthetic multi-rank GPU/NCCL traces with a known truth: analyze must recover it."""

import pytest

from ddpdoctor.analysis import AnalyzeOptions, analyze
from ddpdoctor_synth import generate, scenario_from_shares

TOL = 0.02  # acceptance: injected shares within 2 percentage points
CHECKED = (
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


def recover(tmp_path, sc, **opts):
    truth = generate(sc, tmp_path, gzip=True)
    a = analyze([str(tmp_path)], AnalyzeOptions(jobs=1, **opts))
    return truth, a


def assert_shares(truth, a):
    for s in a.summaries:
        ours = a.rank_share(s)
        for col in CHECKED:
            assert ours[col] == pytest.approx(truth.per_rank[s.rank][col], abs=TOL), (s.rank, col)


def test_dataloader_wait_and_half_exposed_comm(tmp_path):
    sc = scenario_from_shares(world_size=4, steps=5, dataloader=0.30, comm=0.40, comm_exposed=0.20)
    truth, a = recover(tmp_path, sc)
    assert_shares(truth, a)
    for s in a.summaries:
        share = a.rank_share(s)
        assert share["dataloader_wait"] == pytest.approx(0.30, abs=TOL)
        assert share["comm"] == pytest.approx(0.40, abs=TOL)
        assert share["comm_exposed"] == pytest.approx(0.20, abs=TOL)
    assert a.cross.stragglers == []


def test_rank3_late_by_8ms_is_named(tmp_path):
    sc = scenario_from_shares(
        world_size=8,
        steps=4,
        dataloader=0.10,
        comm=0.30,
        comm_exposed=0.10,
        straggler_rank=3,
        straggler_extra_us=8000.0,
    )
    truth, a = recover(tmp_path, sc)
    assert truth.straggler == 3
    assert_shares(truth, a)
    assert [st.rank for st in a.cross.stragglers] == [3]
    assert a.cross.stragglers[0].late_us == pytest.approx(truth.straggler_late_us, abs=50)
    assert a.cross.stragglers[0].late_us == pytest.approx(8000, abs=50)
    assert a.cross.stragglers[0].steps_late == 4
    # the others wait for rank 3 inside the first all-reduce; rank 3 hardly waits
    waits = {s.rank: a.rank_share(s)["comm_sync_wait"] for s in a.summaries}
    assert min(waits, key=waits.get) == 3 and waits[0] > 0.05


def test_launch_bound_host_idle(tmp_path):
    sc = scenario_from_shares(world_size=2, steps=3, dataloader=0.05, comm=0.20, comm_exposed=0.05, host_idle=0.25)
    truth, a = recover(tmp_path, sc)
    assert_shares(truth, a)
    assert a.rank_share(a.summaries[0])["host_idle"] == pytest.approx(0.25, abs=TOL)


def test_scenario_files_shipped_with_the_generator_are_recovered(tmp_path):
    from pathlib import Path

    import ddpdoctor_synth as synth
    from ddpdoctor_synth import load_scenario

    folder = Path(synth.__file__).parent / "scenarios"
    files = sorted(folder.glob("*.toml"))
    assert files
    for _i, f in enumerate(files):
        out = tmp_path / f.stem
        truth, a = recover(out, load_scenario(f))
        assert_shares(truth, a)
        assert [st.rank for st in a.cross.stragglers][:1] == ([truth.straggler] if truth.straggler is not None else [])
