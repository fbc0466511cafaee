"""Clock alignment across hosts (#17 part 3): the estimator on matrices and RankSummary objects
built in code, then synthetic 2-node jobs with a skewed node through `ddpdoctor analyze`."""

import json
import subprocess
import sys

import numpy as np
import pytest

from ddpdoctor.analysis import AnalyzeOptions, analyze
from ddpdoctor.metrics.breakdown import Collectives, RankSummary
from ddpdoctor.metrics.clocks import end_matrix, estimate_offsets
from ddpdoctor.metrics.columns import COLUMNS
from ddpdoctor.metrics.cross_rank import analyze_cross_rank
from ddpdoctor.metrics.steps import StepWindow
from ddpdoctor.resources import metric_params
from ddpdoctor_synth import Scenario, generate

HOSTS = ["a"] * 4 + ["b"] * 4
RANKS = list(range(8))
NO_CORRECTION = {"clock.min_offset_us": 1e12}


def ends(n=40, skew_us=0.0, noise_us=5.0, seed=0):
    """n collectives × 8 ranks of end times; ranks 4-7 (host b) read skew_us ahead."""
    rng = np.random.default_rng(seed)
    e = np.arange(n)[:, None] * 100_000.0 + rng.normal(0.0, noise_us, (n, 8))
    e[:, 4:] += skew_us
    return e


# ------------------------------------------------------------------ the estimator on matrices
@pytest.mark.parametrize("skew", [-50_000.0, -3000.0, 400.0, 50_000.0])
def test_a_consistent_offset_is_estimated_per_host_and_applied(skew):
    est = estimate_offsets(ends(skew_us=skew), HOSTS, RANKS)
    assert est.unit == "host" and est.reference == "a" and est.applied
    b = est.units["b"]
    assert b.applied and b.collectives == 40 and b.offset_us == pytest.approx(skew, abs=5)
    assert all(est.offset_us_by_rank[r] == 0.0 for r in range(4))
    assert all(est.offset_us_by_rank[r] == b.offset_us for r in range(4, 8))
    assert "clock offsets corrected" in est.notes[0] and "b " in est.notes[0]


def test_one_host_is_exactly_zero_whatever_the_ends_say():
    e = ends(skew_us=5000.0)  # even a consistent difference between ranks of one host
    est = estimate_offsets(e, ["h"] * 8, RANKS)
    assert not est.applied and est.units == {} and est.notes == []
    assert set(est.offset_us_by_rank.values()) == {0.0}


def test_too_few_collectives_are_not_trusted():
    est = estimate_offsets(ends(n=5, skew_us=50_000.0), HOSTS, RANKS)
    b = est.units["b"]
    assert not est.applied and not b.applied and b.guarded and b.collectives == 5
    assert set(est.offset_us_by_rank.values()) == {0.0}
    assert "not corrected (only 5 collectives" in est.notes[0]


def test_inconsistent_ends_are_not_trusted():
    # the difference drifts from 0 to 20 ms over the trace: no single offset describes it
    e = ends(skew_us=0.0)
    e[:, 4:] += np.linspace(0.0, 20_000.0, 40)[:, None]
    est = estimate_offsets(e, HOSTS, RANKS)
    assert not est.units["b"].applied and est.units["b"].guarded
    assert "inconsistent" in est.units["b"].reason and set(est.offset_us_by_rank.values()) == {0.0}


def test_an_offset_within_the_noise_is_not_corrected():
    est = estimate_offsets(ends(skew_us=300.0, noise_us=300.0), HOSTS, RANKS)
    b = est.units["b"]
    assert not b.applied and not b.guarded and "within the noise" in b.reason
    assert set(est.offset_us_by_rank.values()) == {0.0}


def test_a_tiny_offset_is_not_corrected_and_said_so():
    est = estimate_offsets(ends(skew_us=30.0, noise_us=1.0), HOSTS, RANKS)
    assert not est.applied and "below 100 µs" in est.units["b"].reason
    assert est.notes == ["ranks span 2 hosts whose collective end times agree within 30 µs: clocks not corrected"]


def test_unknown_hosts_are_estimated_per_rank_but_never_applied():
    est = estimate_offsets(ends(skew_us=50_000.0), [None] * 8, RANKS)
    assert est.unit == "rank" and not est.applied
    assert est.units["rank 5"].offset_us == pytest.approx(50_000.0, abs=10)
    assert set(est.offset_us_by_rank.values()) == {0.0}
    assert "host names unknown" in est.notes[0]


def test_thresholds_come_from_the_params():
    est = estimate_offsets(ends(n=5, skew_us=50_000.0), HOSTS, RANKS, {"min_collectives": 4})
    assert est.applied


def test_a_host_missing_from_some_collectives_uses_the_shared_ones():
    e = ends(skew_us=2000.0)
    e[:20, 4:] = np.nan
    est = estimate_offsets(e, HOSTS, RANKS)
    assert est.units["b"].collectives == 20 and est.units["b"].offset_us == pytest.approx(2000.0, abs=5)


def test_end_matrix():
    m = end_matrix([[(0, 1.0), (2, 3.0)], [(1, 5.0)]], [0, 1, 2])
    assert np.array_equal(np.isnan(m), [[False, True, False], [True, False, True]])
    assert m[0, 2] == 3.0 and m[1, 1] == 5.0


# ------------------------------------------------------------------ cross_rank on RankSummary objects
def summary(rank, host, arrivals, ends_, kind="all_reduce"):
    n = len(arrivals)
    steps = [StepWindow(f"ProfilerStep#{i}", i, e - 1000.0, e + 10.0) for i, e in enumerate(ends_)]
    values = {c: [None] * n for c in COLUMNS}
    values["step_time"] = [w.duration for w in steps]
    coll = Collectives(
        step=np.arange(n), kind=[kind] * n, start=np.asarray(arrivals, float), end=np.asarray(ends_, float)
    )
    return RankSummary(
        rank=rank,
        paths=[],
        world_size=4,
        backend="nccl",
        devices=[],
        host=host,
        pid=None,
        schema="",
        device_kind="gpu",
        comm_source="kernels",
        step_source="ProfilerStep",
        steps=steps,
        values=values,
        collectives=coll,
    )


def job(skew_us, late_rank=1, late_us=300.0, n=12, hosts=("a", "a", "b", "b"), kind="all_reduce"):
    """4 ranks, 2 per host; every collective ends at k·10 ms + 500; late_rank arrives late_us after
    the others (who arrive at +0); host b's clock reads skew_us ahead."""
    out = []
    for r in range(4):
        skew = skew_us if hosts[r] == "b" else 0.0
        e = [k * 10_000.0 + 500.0 + skew for k in range(n)]
        a = [k * 10_000.0 + (late_us if r == late_rank else 0.0) + skew for k in range(n)]
        out.append(summary(r, hosts[r], a, e, kind))
    return out


@pytest.mark.parametrize("skew", [-5000.0, 0.0, 2000.0])
def test_cross_rank_corrects_lateness_and_sync_wait(skew):
    cr = analyze_cross_rank(job(skew))
    assert cr.clock_offset_us == {0: 0.0, 1: 0.0, 2: skew, 3: skew}
    assert cr.arrival_late_us[1] == pytest.approx(300.0) and cr.arrival_late_us[2] == pytest.approx(0.0)
    assert [s.rank for s in cr.stragglers] == [1]


def test_cross_rank_without_correction_blames_the_skewed_host():
    cr = analyze_cross_rank(job(2000.0), metric_params(NO_CORRECTION))
    assert set(cr.clock_offset_us.values()) == {0.0}
    assert {s.rank for s in cr.stragglers} == {2, 3}


def test_cross_rank_point_to_point_does_not_estimate_clocks():
    cr = analyze_cross_rank(job(2000.0, kind="send_recv"))
    assert set(cr.clock_offset_us.values()) == {0.0} and cr.clock.units["b"].collectives == 0


def test_cross_rank_one_host_or_no_host_changes_nothing():
    for hosts in (("h",) * 4, (None,) * 4):
        cr = analyze_cross_rank(job(0.0, hosts=hosts))
        assert set(cr.clock_offset_us.values()) == {0.0} and not cr.clock.applied
        assert [s.rank for s in cr.stragglers] == [1]


# ------------------------------------------------------------------ synthetic 2-node jobs, end to end
def two_nodes(tmp_path, skew_ms, straggler=1, steps=6):
    sc = Scenario(
        world_size=8,
        steps=steps,
        ranks_per_node=4,
        node_skew_ms=[0.0, skew_ms],
        straggler_rank=straggler,
        straggler_extra_us=10_000.0 if straggler is not None else 0.0,
        kernel_us=500.0,
        end_jitter_us=20.0,
        name="two_nodes",
    )
    generate(sc, tmp_path)
    return tmp_path


def cli_json(path, *extra):
    out = path / "report.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "analyze",
            str(path),
            "--no-config",
            "-j",
            "1",
            "--json",
            str(out),
            "--force",
            *extra,
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())["analysis"]["cross_rank"]


@pytest.mark.parametrize("skew_ms", [pytest.param(-50.0, marks=pytest.mark.slow), 50.0])  # one sign in the fast tier
def test_cli_names_the_real_straggler_and_reports_the_offset(tmp_path, skew_ms):
    cr = cli_json(two_nodes(tmp_path, skew_ms))
    assert [s["rank"] for s in cr["stragglers"]] == [1]
    assert cr["clock_offset_us"]["5"] == pytest.approx(skew_ms * 1000, abs=50)
    assert cr["clock_offset_us"]["0"] == 0.0
    b = cr["clock"]["units"]["node1"]
    assert b["applied"] and cr["clock"]["unit"] == "host" and cr["clock"]["reference"] == "node0"
    assert any("clock offsets corrected" in n for n in cr["notes"])
    # the same traces without the correction blame the wrong node
    raw = cli_json(tmp_path, "--set", "metrics.clock.min_offset_us=1e12")
    named = {s["rank"] for s in raw["stragglers"]}
    assert named == ({4, 5, 6, 7} if skew_ms > 0 else {0, 1, 2, 3})


@pytest.mark.parametrize("skew_ms", [-20.0, -5.0, -1.0, 0.0, 1.0, 5.0, 20.0])
def test_skews_in_between_name_only_the_real_straggler(tmp_path, skew_ms):
    a = analyze([str(two_nodes(tmp_path, skew_ms))], AnalyzeOptions(jobs=1))
    assert [s.rank for s in a.cross.stragglers] == [1]
    assert a.cross.stragglers[0].late_us == pytest.approx(10_000.0, abs=300)
    assert a.cross.clock_offset_us[4] == (pytest.approx(skew_ms * 1000, abs=50) if skew_ms else 0.0)


@pytest.mark.parametrize("skew_ms", [-50.0, 7.0, 50.0])
def test_skew_without_a_straggler_names_none(tmp_path, skew_ms):
    a = analyze([str(two_nodes(tmp_path, skew_ms, straggler=None))], AnalyzeOptions(jobs=1))
    assert a.cross.stragglers == []
    assert a.cross.clock_offset_us[7] == pytest.approx(skew_ms * 1000, abs=50)
    raw = analyze([str(tmp_path)], AnalyzeOptions(jobs=1), thresholds=metric_params(NO_CORRECTION))
    assert raw.cross.stragglers  # uncorrected, a whole node looks late


def test_scenario_nodes_and_skew_round_trip_and_validate(tmp_path):
    from ddpdoctor_synth import dump_scenario, load_scenario

    sc = Scenario(world_size=8, ranks_per_node=4, node_skew_ms=[0.0, -12.5], end_jitter_us=20.0, name="x")
    assert load_scenario(dump_scenario(sc, tmp_path / "sc.toml")) == sc
    assert [sc.host_of(r) for r in (0, 3, 4, 7)] == ["node0", "node0", "node1", "node1"]
    assert sc.skew_ns(5) == -12_500_000 and sc.skew_ns(1) == 0
    for bad in (
        {"node_skew_ms": [1.0]},
        {"ranks_per_node": 4, "node_skew_ms": [0.0, 0.0, 1.0]},
        {"ranks_per_node": 4, "node_skew_ms": [0.0, 2000.0]},
        {"end_jitter_us": -1.0},
    ):
        with pytest.raises(ValueError):
            Scenario(world_size=8, **bad)
