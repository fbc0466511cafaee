"""Every bundled sample keeps the result its README row promises."""

from pathlib import Path

import pytest

from ddpdoctor.analysis import AnalyzeOptions, analyze
from ddpdoctor_synth import Truth

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


# bundles recorded with `ddpdoctor run` from examples/ (see sample_traces/README.md)
CAPTURED = ["slow_loader", "heavy_compute", "slow_rank", "comm_heavy", "oom_skip_batch"]


def mean_share(a, col):
    return sum(a.rank_share(s)[col] for s in a.summaries) / len(a.summaries)


@pytest.mark.parametrize("example", CAPTURED)
def test_captured_samples_keep_their_breakdown(example):
    import json

    from ddpdoctor.bundle.settings import load_bundle_facts

    name = f"capture_gloo_2ranks_{example}"
    a = run(name)
    assert [s.rank for s in a.summaries] == [0, 1] and not a.warnings
    assert all(len(s.steps) == 5 and s.device_kind == "cpu" for s in a.summaries)
    facts = load_bundle_facts([str(SAMPLES / name)])
    assert facts["run.world_size"] == 2 and facts["run.ranks_present"] == [0, 1] and facts["config.ddp.used"] is True
    stragglers = [st.rank for st in a.cross.stragglers]
    if example == "slow_loader":
        assert mean_share(a, "dataloader_wait") == pytest.approx(0.85, abs=0.05)
        assert facts["config.dataloader.num_workers"] == 0 and stragglers == []
    elif example == "heavy_compute":
        assert mean_share(a, "compute") == pytest.approx(0.82, abs=0.05)
        assert mean_share(a, "comm_exposed") < 0.15 and stragglers == []
        assert facts["config.optimizer"] == "AdamW"
    elif example == "slow_rank":
        assert stragglers == [1] and a.cross.stragglers[0].late_us == pytest.approx(39_300, abs=3000)
        assert a.rank_share(a.summaries[0])["comm_sync_wait"] == pytest.approx(0.85, abs=0.05)
    elif example == "comm_heavy":
        assert mean_share(a, "comm") == pytest.approx(0.37, abs=0.05)
        assert mean_share(a, "comm_exposed") == pytest.approx(0.37, abs=0.05)  # one bucket: nothing overlaps
        assert mean_share(a, "dataloader_wait") < 0.01 and facts["config.ddp.grad_bytes"] > 50e6
    elif example == "oom_skip_batch":
        assert facts["run.status"] == "failed" and facts["run.exit_code"] == 1
        events = {
            r: [
                json.loads(x) for x in (SAMPLES / name / "ranks" / f"rank{r}" / "events.jsonl").read_text().splitlines()
            ]
            for r in (0, 1)
        }
        assert [e["step"] for e in events[1] if e["kind"] == "oom"] == [4]
        assert [e["kind"] for e in events[0]].count("exception") == 1
        first = facts["run.first_problem"]  # the root cause, not the rank torchrun names
        assert (first["rank"], first["kind"], first["caught"]) == (1, "oom", True)
        assert [(p["rank"], p["kind"]) for p in facts["run.problems"]] == [(1, "oom"), (0, "exception")]
        assert "Root Cause" in (SAMPLES / name / "launcher.log").read_text()


VERDICTS = {
    "slow_loader": ("dataloader", "DL001"),
    "heavy_compute": ("compute", "CP001"),
    "slow_rank": ("imbalance", "IM001"),
    "comm_heavy": ("communication", "CM001"),
}


@pytest.mark.parametrize("example", CAPTURED)
def test_captured_samples_keep_their_verdict(example):
    from ddpdoctor.analysis import AnalyzeOptions
    from ddpdoctor.diagnosis import AnalysisContext, run_analyze
    from ddpdoctor.rules_engine.registry import build_ruleset

    r = run_analyze(
        [str(SAMPLES / f"capture_gloo_2ranks_{example}")],
        AnalyzeOptions(jobs=1, hta="off"),
        AnalysisContext.of(build_ruleset(use_config=False)),
    )
    d = r.diagnosis
    if example == "oom_skip_batch":
        first = d.findings[0]
        assert (first.rule, first.ranks) == ("FL001", [1]) and d.verdict.failed
        assert d.verdict.summary.startswith(
            "The run failed: Rank 1 ran out of CUDA memory (tried to allocate 2.00 GiB)"
        )
        assert d.verdict.confidence_label == "low"  # the recorded steps end in the failure
        assert any(f.rule == "FL002" for f in d.findings)  # torchrun blames rank 0
        return
    assert (d.verdict.bottleneck, d.verdict.rule) == VERDICTS[example], d.verdict.summary
    assert not any(f.category == "failure" for f in d.findings)
    if example == "slow_loader":  # settings recorded by `ddpdoctor run` fill the fix
        dl = next(f for f in d.findings if f.rule == "DL001")
        assert "num_workers=0" in dl.summary and "(seen in the trace)" not in dl.summary
    if example == "comm_heavy":  # one 100 MB bucket for ~51 MB of gradients
        cm = next(f for f in d.findings if f.rule == "CM001")
        assert any("bucket_cap_mb=9" in x.change for x in cm.fixes), [x.change for x in cm.fixes]


def test_the_timeline_shows_a_waiting_rank_waiting():
    """The representative-step timeline splits the wait for the late peer out of exposed communication,
    as the breakdown does: rank 0 of the slow-rank sample waits ~40 ms for rank 1 in its all-reduce."""
    a = run("capture_gloo_2ranks_slow_rank")
    by_rank = {s.rank: s.timeline["segments"] for s in a.summaries}

    def total(segs, c):
        return sum(b - x for x, b in segs.get(c) or [])

    assert total(by_rank[0], "comm_sync_wait") > 30_000 > total(by_rank[0], "comm_exposed")
    assert total(by_rank[1], "comm_sync_wait") == 0  # the late rank does not wait
    for segs in by_rank.values():  # wait and transfer never overlap
        for x, y in segs.get("comm_sync_wait") or []:
            assert all(b <= x or a >= y for a, b in segs["comm_exposed"])


@pytest.mark.parametrize("example", CAPTURED)
def test_captured_samples_are_recorded_by_todays_capture(example):
    """A bundled capture sample shows what `ddpdoctor run` records now: one recorded before the capture
    learned something analyze reads (e.g. the Python stack sampler that names slow_rank.py:37) shows a
    card a fresh run would not ("Profile with with_stack=True"). Re-record it (sample_traces/README.md)."""
    import json

    from ddpdoctor.capture import CAPTURE_VERSION, CAPTURE_VERSIONS

    manifest = json.loads((SAMPLES / f"capture_gloo_2ranks_{example}" / "manifest.json").read_text())
    recorded = manifest.get("capture_version", 1)
    assert recorded >= CAPTURE_VERSION, (
        f"capture_gloo_2ranks_{example} was recorded by capture version {recorded}; today's is {CAPTURE_VERSION} "
        f"({CAPTURE_VERSIONS[CAPTURE_VERSION]}): re-record it as sample_traces/README.md says"
    )
