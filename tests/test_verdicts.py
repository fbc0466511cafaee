"""Verdicts end to end: real traces with a documented label, synthetic runs with an
injected bottleneck, and the CLI around the rules (JSON schema, --set, --rules)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.analysis import AnalyzeOptions
from ddpdoctor.diagnosis import AnalysisContext, run_analyze
from ddpdoctor.resources import metric_params
from ddpdoctor.rules_engine.registry import build_ruleset
from ddpdoctor_synth import generate, scenario_from_shares

ROOT = Path(__file__).resolve().parents[1]
VERDICT = metric_params()["verdict"]  # rules/metrics.toml [verdict] as shipped
SAMPLES = ROOT / "sample_traces"
OPTS = AnalyzeOptions(jobs=1, hta="off")


def diagnose(path, sets=()):
    return run_analyze([str(path)], OPTS, AnalysisContext.of(build_ruleset(sets=list(sets), use_config=False)))


def fired(report) -> dict:
    return {f.rule: f for f in report.diagnosis.findings}


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "ddpdoctor", *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_tbplugin_num_workers_0_is_dataloader_bound_with_a_num_workers_fix(real_traces):
    r = diagnose(real_traces / "kineto_tbplugin_resnet50_num_workers_0")
    assert r.diagnosis.verdict.bottleneck == "dataloader"
    dl = fired(r)["DL001"]
    assert r.facts["config.dataloader.num_workers"] == 0  # read off _SingleProcessDataLoaderIter
    assert any("num_workers=workers" in f.change or "num_workers=" in f.title for f in dl.fixes)
    assert "num_workers=0" in dl.summary
    assert 1.2 < r.diagnosis.verdict.expected_speedup < 1.6


def test_tbplugin_num_workers_4_is_not_dataloader_bound(real_traces):
    r = diagnose(real_traces / "kineto_tbplugin_resnet50_num_workers_4")
    assert r.diagnosis.verdict.bottleneck != "dataloader"
    assert "DL001" not in fired(r)


def test_deepseek_is_neither_communication_nor_imbalance_bound(real_traces):
    r = diagnose(real_traces / "deepseek_v3_train_ep64_H800_rank0")
    assert r.diagnosis.verdict.bottleneck not in ("communication", "imbalance")
    assert not {"CM001", "IM001", "IM002"} & set(fired(r))
    assert r.facts["config.mixed_precision"] == "fp8"  # FP8 GEMM kernels: no autocast advice
    assert all("autocast" not in f.title for f in fired(r).get("CP001").fixes)
    missing = {m for a in r.diagnosis.abstained if a["category"] == "imbalance" for m in a["missing"]}
    assert missing, "one rank of 64: imbalance must abstain, not pass"


@pytest.mark.parametrize(
    "folder, world", [("hta_cpu_only_gloo_rank34_of300", 300), ("deepseek_v3_train_ep64_H800_rank0", 64)]
)
def test_one_rank_of_a_large_job_is_never_high_confidence(real_traces, folder, world):
    """#10: one rank of 300 (one step) was "communication-bound, confidence high 1.00"; one rank of 64 "high".
    Coverage and steps now lower the confidence, and the hints say what to record to raise it."""
    v = diagnose(real_traces / folder).diagnosis.verdict
    assert v.confidence_label == "low" and v.confidence < 0.35, (v.confidence, v.confidence_label)
    hints = " / ".join(v.confidence_hints)
    assert f"only 1 of {world} ranks were analyzed: record every rank" in hints, hints
    assert "1 step recorded: record at least" in hints and "(s)" not in hints, hints


def test_tracelens_no_pool_trace_names_the_allocator(real_traces):
    r = diagnose(real_traces / "tracelens_resnet18_no_pool_1xMI300X")
    cp = fired(r)["CP002"]
    assert r.diagnosis.verdict.rule == "CP002"
    assert any("expandable_segments" in f.change for f in cp.fixes)


SCENARIOS = {
    "dataloader": dict(dataloader=0.30, comm=0.30, comm_exposed=0.03),
    "communication": dict(dataloader=0.02, comm=0.50, comm_exposed=0.35),
    "compute": dict(dataloader=0.02, comm=0.30, comm_exposed=0.03),
    "host": dict(dataloader=0.02, comm=0.20, comm_exposed=0.03, host_idle=0.30),
    "imbalance": dict(dataloader=0.02, comm=0.45, comm_exposed=0.25, straggler_rank=2, straggler_extra_us=20000.0),
}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    out = {}
    for name, shares in SCENARIOS.items():
        folder = tmp_path_factory.mktemp(name)
        generate(scenario_from_shares(world_size=4, steps=3, kernel_us=400.0, **shares), folder)
        out[name] = diagnose(folder)
    return out


@pytest.mark.parametrize(
    "name,bottleneck,rule",
    [
        ("dataloader", "dataloader", "DL001"),
        ("communication", "communication", "CM001"),
        ("compute", "compute", "CP001"),
        ("host", "compute", "CP002"),
        ("imbalance", "imbalance", "IM001"),
    ],
)
def test_synthetic_runs_get_the_injected_verdict(synthetic, name, bottleneck, rule):
    v = synthetic[name].diagnosis.verdict
    assert (v.bottleneck, v.rule) == (bottleneck, rule), v.summary
    assert v.confidence is not None and 0.0 <= v.confidence <= 1.0


def test_a_straggler_is_named_and_the_waiting_ranks_are_not_blamed(synthetic):
    r = synthetic["imbalance"]
    f = fired(r)
    assert f["IM001"].ranks == [2] and "Rank 2 is a straggler" in f["IM001"].summary
    assert "20.0 ms" in f["IM001"].summary
    # ranks 0, 1, 3 spend the straggler's 20 ms inside their all-reduce: that is not "communication-bound"
    assert "CM001" not in f or f["CM001"].cost < f["IM001"].cost


def test_nothing_costs_much_says_compute_bound_with_gpu_busy(synthetic):
    v = synthetic["compute"].diagnosis.verdict
    assert v.expected_speedup is None and "GPU busy" in v.summary


@pytest.mark.parametrize(
    "sample,bottleneck,straggler",
    [
        ("synthetic_gpu_4ranks_dataloader_bound", "dataloader", None),
        ("synthetic_gpu_8ranks_straggler_rank3", "imbalance", 3),
        # rank 1 sleeps 30 ms before every forward (58 % of the step) and both ranks wait 32 % for data:
        # removing the sleep saves more, so imbalance leads and the DataLoader wait comes second
        ("gloo_cpu_2ranks_slow_loader_straggler", "imbalance", 1),
    ],
)
def test_bundled_samples_keep_their_verdict(sample, bottleneck, straggler):
    r = diagnose(SAMPLES / sample)
    assert r.diagnosis.verdict.bottleneck == bottleneck
    if straggler is not None:
        assert fired(r)["IM001"].ranks == [straggler]


def test_json_carries_verdict_and_findings(tmp_path):
    out = tmp_path / "d.json"
    res = run_cli("analyze", SAMPLES / "gloo_cpu_2ranks_slow_loader_straggler", "--json", out, "-q", "--no-config")
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    assert d["schema"] == "ddpdoctor.diagnosis/1"
    assert {"bottleneck", "confidence", "expected_speedup", "summary"} <= set(d["verdict"])
    f = d["findings"][0]
    assert {"rule", "category", "severity", "ranks", "summary", "evidence", "fixes"} <= set(f)
    assert {"title", "change"} <= set(f["fixes"][0])
    assert d["analysis"]["schema"] == "ddpdoctor.analysis/1" and d["facts"]["run.ranks_analyzed"] == 2


@pytest.mark.slow  # four `ddpdoctor analyze` processes; tests/test_rules_engine.py has the in-process cases
def test_set_and_user_rules_change_the_cli_result(tmp_path):
    sample = SAMPLES / "gloo_cpu_2ranks_slow_loader_straggler"
    res = run_cli("analyze", sample, "--set", "DL001.min_wait_share=0.5", "--hta", "off", "--no-config")
    assert res.returncode == 0, res.stderr
    assert "Verdict: imbalance-bound" in res.stdout
    user = tmp_path / "rules"
    user.mkdir()
    src = Path(build_ruleset(use_config=False).rules["IM001"].path).read_text()
    (user / "IM001.toml").write_text(src.replace("default = 0.05", "default = 0.9", 1))
    res = run_cli(
        "analyze", sample, "--rules", user, "--set", "DL001.min_wait_share=0.5", "--hta", "off", "--no-config"
    )
    assert res.returncode == 0 and "IM001" not in res.stdout
    (user / "IM001.toml").write_text(src.replace('severity = "high"', 'severity = "dire"'))
    res = run_cli("analyze", sample, "--rules", user)
    assert res.returncode == 2 and res.stderr.startswith(f"ddpdoctor: error: {user / 'IM001.toml'}:4: ")
    assert "Traceback" not in res.stderr


def test_rules_commands():
    res = run_cli("rules", "list", "--no-config")
    assert res.returncode == 0 and "DL001" in res.stdout and "CM001" in res.stdout
    res = run_cli("rules", "explain", "DL001", "--no-config")
    assert res.returncode == 0
    for text in ("dataloader.wait", "min_wait_share = 0.1", "Why it matters", "Fixes", "num_workers", "References"):
        assert text in res.stdout
    res = run_cli("rules", "explain", "XX123", "--no-config")
    assert res.returncode == 2 and "no rule 'XX123'" in res.stderr
    res = run_cli("rules", "test", "--no-config")
    assert res.returncode == 0 and "rule test cases passed" in res.stdout


def _synthetic_matrix():
    import tomllib

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios_synthetic.toml"
    with open(path, "rb") as fh:
        return tomllib.load(fh)["scenario"]


@pytest.mark.parametrize("entry", _synthetic_matrix(), ids=lambda e: e["name"])
def test_synthetic_matrix_entry(entry, tmp_path):
    """The synthetic half of the accuracy matrix (benchmarks/accuracy.py reads the same list)."""
    from ddpdoctor_synth import scenario_from_dict

    generate(scenario_from_dict(dict(entry["args"], name=entry["name"])), tmp_path)
    r = diagnose(tmp_path)
    v = r.diagnosis.verdict
    assert (v.bottleneck, v.rule) == (entry["expected_verdict"], entry["expected_rule"]), v.summary
    top = fired(r)[v.rule]
    assert top.fixes and entry["expected_first_fix_contains"] in top.fixes[0].title + top.fixes[0].change


def _contended_straggler_facts(**over):
    import numpy as np

    from ddpdoctor.expr import Vec

    ranks = np.array([0, 1])
    facts = {
        "trace.present": True,
        "run.device": "cpu",
        "run.ranks": [0, 1],
        "run.ranks_analyzed": 2,
        "run.world_size": 2,
        "run.steps": 5,
        "rank.share.compute": Vec(np.array([0.84, 0.59]), ranks),
        "rank.share.dataloader_wait": Vec(np.array([0.01, 0.01]), ranks),
        "straggler.count": 1,
        "straggler.ranks": [0],
        "straggler.rank": 0,
        "straggler.late_us": 20000.0,
        "straggler.late_share": 0.2,
        "straggler.steps_late": 5,
        "straggler.steps": 5,
        "straggler.extra_column": "compute",
        "straggler.extra_us": 19000.0,
        "cross.imbalance_score": 0.15,
        "cross.input_shapes": "constant",
        # measured contention: other processes took 47 % of the host's CPU time (IM004 fires)
        "host.contention.other_busy_share": 0.47,
        "host.contention.cpus_per_rank": 1.0,
        "host.contention.threads_per_cpu": 1.0,
    }
    facts.update(over)
    return facts


def test_a_late_rank_with_nothing_of_its_own_on_a_contended_host_is_noise():
    from ddpdoctor.rules_engine.verdict import diagnose as decide_facts

    rules = build_ruleset()
    d = decide_facts(_contended_straggler_facts(), rules)
    assert d.verdict.rule == "CP001", d.verdict.summary
    im = next(c for c in d.costs if c.rule == "IM001")
    assert not im.eligible and "machine noise" in im.why_not
    # set aside as machine noise, it says how the run was recorded: its fix comes after the verdict's (issue 41:
    # heavy_compute led with such a finding's fix in 9 of 10 idle runs, each naming another rank)
    order = [f.rule for f in d.findings]
    assert order.index("CP001") < order.index("IM001"), order
    # the same lateness with a cause of its own still decides: extra work, GC pauses, a call holding the
    # GIL, uneven inputs; and without measured contention (1 CPU per rank and nothing else running is the
    # job's own layout, not contention: issue #25's 98 %-late rank set aside as noise)
    for over in (
        {
            "python.extra_work.rank": 0,
            "python.extra_work.where": "torch.save (train.py:3)",
            "python.extra_work.ms_per_step": 19.0,
            "python.extra_work.share": 0.19,
        },
        {"python.gc.rank": 0, "python.gc.extra_ms_per_step": 18.0, "python.gc.extra_share": 0.18},
        {
            "python.gil_held.rank": 0,
            "python.gil_held.where": "json.dumps in log (train.py:9)",
            "python.gil_held.ms_per_step": 18.0,
            "python.gil_held.share": 0.18,
        },
        {"cross.input_shapes": "varying"},
        {"straggler.extra_column": "dataloader_wait"},
        {"host.contention.other_busy_share": 0.0},
        {"host.contention.other_busy_share": 0.0, "straggler.late_share": 0.98},
    ):
        d = decide_facts(_contended_straggler_facts(**over), rules)
        assert d.verdict.rule == "IM001", (over, d.verdict.summary)


def _late_loader_facts(**over):
    """Rank 1 alone waits for its DataLoader (larger images in its shard); rank 0 waits for rank 1."""
    import numpy as np

    from ddpdoctor.expr import Vec

    ranks = np.array([0, 1])
    facts = _contended_straggler_facts(
        **{
            "rank.share.dataloader_wait": Vec(np.array([0.0, 0.28]), ranks),
            "rank.share.compute": Vec(np.array([0.70, 0.66]), ranks),
            "straggler.ranks": [1],
            "straggler.rank": 1,
            "straggler.late_us": 22000.0,
            "straggler.late_share": 0.22,
            "straggler.steps_late": 3,
            "straggler.steps": 5,
            "straggler.extra_column": "dataloader_wait",
            "straggler.extra_us": 25000.0,
            "cross.imbalance_score": 0.11,
            "python.extra_work.rank": 1,
            "python.extra_work.where": "ImageShard.__getitem__ (train.py:38)",
            "python.extra_work.ms_per_step": 24.0,
            "python.extra_work.share": 0.24,
        }
    )
    facts.update(over)
    return facts


def test_a_loader_wait_paid_only_by_the_late_rank_is_the_imbalance():
    from ddpdoctor.rules_engine.verdict import diagnose as decide_facts

    d = decide_facts(_late_loader_facts(), build_ruleset())
    assert d.verdict.rule == "IM001", d.verdict.summary
    dl = next(c for c in d.costs if c.rule == "DL001")
    assert not dl.eligible and "only on the late rank 1" in dl.why_not
    im = next(f for f in d.findings if f.rule == "IM001")
    # the loader fix first, naming where the sampler saw the time; not the "extra work on one rank" fix
    assert im.fixes[0].title.startswith("Rank 1 waits longer for its data")
    assert "ImageShard.__getitem__ (train.py:38)" in im.fixes[0].change
    assert not any("do that work on every rank" in f.title for f in im.fixes)
    # the ranks take turns being late (agreement 0.6) on a contended host, but the sampler saw the late
    # rank's own work: that is a cause, not noise
    assert next(c for c in d.costs if c.rule == "IM001").eligible


def test_a_loader_wait_on_every_rank_stays_dataloader_bound():
    import numpy as np

    from ddpdoctor.expr import Vec
    from ddpdoctor.rules_engine.verdict import diagnose as decide_facts

    facts = _late_loader_facts(
        **{"rank.share.dataloader_wait": Vec(np.array([0.30, 0.45]), np.array([0, 1])), "straggler.late_share": 0.15}
    )
    d = decide_facts(facts, build_ruleset())
    assert d.verdict.rule == "DL001", d.verdict.summary
    assert next(c for c in d.costs if c.rule == "DL001").eligible


def test_alternating_lateness_without_a_cause_stays_noise_on_a_contended_host():
    import numpy as np

    from ddpdoctor.expr import Vec
    from ddpdoctor.rules_engine.verdict import diagnose as decide_facts

    facts = _late_loader_facts(
        **{
            "straggler.extra_column": "other",
            "rank.share.dataloader_wait": Vec(np.array([0.01, 0.01]), np.array([0, 1])),
        }
    )
    for k in [k for k in facts if k.startswith("python.extra_work")]:
        del facts[k]
    d = decide_facts(facts, build_ruleset())
    im = next(c for c in d.costs if c.rule == "IM001")
    assert not im.eligible and "take turns" in im.why_not
    assert d.verdict.rule != "IM001"


def test_a_cost_on_one_rank_in_few_steps_on_a_contended_host_is_noise():
    import numpy as np

    from ddpdoctor.expr import Vec
    from ddpdoctor.rules_engine.verdict import diagnose as decide_facts

    ranks = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    # rank 1 waits for data in 2 of its 5 steps (lost cycles), rank 0 never; no straggler
    waits = Vec(np.array([0.05, 0.05, 0.05, 0.05, 0.05, 0.45, 0.05, 0.40, 0.05, 0.05]), ranks)
    facts = _contended_straggler_facts(
        **{
            "straggler.count": 0,
            "straggler.ranks": [],
            "rank.share.dataloader_wait": Vec(np.array([0.05, 0.20]), np.array([0, 1])),
            "step.share.dataloader_wait": waits,
        }
    )
    for k in [k for k in facts if k.startswith("straggler.") and k not in ("straggler.count", "straggler.ranks")]:
        del facts[k]
    d = decide_facts(facts, build_ruleset())
    dl = next(c for c in d.costs if c.rule == "DL001")
    assert not dl.eligible and "rank 1 only" in dl.why_not, dl
    assert d.verdict.rule == "CP001", d.verdict.summary
    # the same wait on an uncontended host (no CPU time taken by other processes) is not machine noise, but
    # two spikes in ten rank-steps put its mean (12.5 %) within two standard errors (± 9 %) of DL001's 10 %:
    # at its line, it decides nothing and the verdict names it (issue 41 item 1)
    facts["host.contention.other_busy_share"] = 0.0
    d = decide_facts(facts, build_ruleset())
    dl = next(c for c in d.costs if c.rule == "DL001")
    assert dl.at_line and "rank 1 only" not in dl.why_not, dl
    assert d.verdict.rule == "CP001" and d.verdict.label == "compute-bound; dataloader at the 10 % line"
    # ... and a wait rank 1 pays in every step, well clear of the line, decides
    facts["step.share.dataloader_wait"] = Vec(np.array([0.05] * 5 + [0.45, 0.40, 0.45, 0.40, 0.45]), ranks)
    facts["rank.share.dataloader_wait"] = Vec(np.array([0.05, 0.43]), np.array([0, 1]))
    d = decide_facts(facts, build_ruleset())
    assert d.verdict.rule == "DL001", d.verdict.summary


def _tiny_buckets_busy_facts(rank0_wait: float):
    """comm_tiny_buckets_deep on a contended host (acc24 busy run 2): a CPU burner slows rank 1, whose
    lateness is set aside as noise; rank 0 spends `rank0_wait` of its step waiting for it, so its
    exposed transfer (every rank runs the same all-reduces) is a smaller share of its longer step."""
    import numpy as np

    from ddpdoctor.expr import Vec

    rows = np.array([0] * 5 + [1] * 5)
    both = np.array([0, 1])
    facts = _contended_straggler_facts(
        **{
            "straggler.ranks": [1],
            "straggler.rank": 1,
            "straggler.late_share": 0.25,
            "straggler.late_us": 25000.0,
            "straggler.extra_us": 24000.0,
            "rank.share.compute": Vec(np.array([0.55, 0.80]), both),
            "rank.share.comm_transfer_exposed": Vec(np.array([0.09, 0.14]), both),
            "rank.share.comm_wait_exposed": Vec(np.array([rank0_wait, 0.01]), both),
            "step.share.comm_transfer_exposed": Vec(np.array([0.09] * 5 + [0.14, 0.14, 0.14, 0.14, 0.14]), rows),
            "step.share.comm_wait_exposed": Vec(np.array([rank0_wait] * 5 + [0.01] * 5), rows),
            "rank.share.comm": Vec(np.array([0.40, 0.15]), both),
            "rank.collectives_per_step": Vec(np.array([300.0, 300.0]), both),
        }
    )
    return facts


def test_a_cost_every_rank_pays_is_judged_net_of_the_wait_for_a_late_rank_set_aside_as_noise():
    from ddpdoctor.rules_engine.verdict import diagnose as decide_facts
    from ddpdoctor.rules_engine.verdict import net_of_peer_wait

    d = decide_facts(_tiny_buckets_busy_facts(rank0_wait=0.30), build_ruleset())
    im = next(c for c in d.costs if c.rule == "IM001")
    assert not im.eligible and "machine noise" in im.why_not
    cm = next(c for c in d.costs if c.rule == "CM001")
    # measured as it is (mean of 9 % and 14 %), but not noise: net of rank 0's 30 % wait it is 13 % there
    assert cm.cost == pytest.approx(0.115) and cm.eligible and cm.why_not is None
    assert d.verdict.rule == "CM001" and d.verdict.bottleneck == "communication", d.verdict.summary
    net = net_of_peer_wait(_tiny_buckets_busy_facts(rank0_wait=0.30))
    assert net["rank.share.comm_transfer_exposed"].values[0] == pytest.approx(0.09 / 0.70)
    assert list(net["step.share.comm_wait_exposed"].values) == [0.0] * 10
    # without that wait, rank 0's transfer stays under the bar: a cost on rank 1 alone, in half the
    # rank-steps, on a contended host is still noise
    d = decide_facts(_tiny_buckets_busy_facts(rank0_wait=0.0), build_ruleset())
    cm = next(c for c in d.costs if c.rule == "CM001")
    assert not cm.eligible and "rank 1 only" in cm.why_not
    assert d.verdict.rule != "CM001", d.verdict.summary


def test_extra_work_the_sampler_found_on_one_rank_is_the_imbalance_without_a_straggler():
    """one_rank_larger_images on a contended host (keep20 busy-0): no steady straggler in 5 steps,
    DL001 on rank 1 in half of its steps (machine-noise pattern), but the Python sampler puts 25 %
    of the step in rank 1's Dataset.__getitem__: the workload's own imbalance (IM005), first fix on its data."""
    import numpy as np

    from ddpdoctor.expr import Vec
    from ddpdoctor.rules_engine.verdict import diagnose as decide_facts

    ranks = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    waits = Vec(np.array([0.05, 0.05, 0.05, 0.05, 0.05, 0.45, 0.05, 0.40, 0.05, 0.05]), ranks)
    facts = _contended_straggler_facts(
        **{
            "straggler.count": 0,
            "straggler.ranks": [],
            "rank.share.dataloader_wait": Vec(np.array([0.05, 0.20]), np.array([0, 1])),
            "step.share.dataloader_wait": waits,
            "python.extra_work.rank": 1,
            "python.extra_work.share": 0.25,
            "python.extra_work.ms_per_step": 34.9,
            "python.extra_work.where": "ImageShard.__getitem__ (train.py:38)",
        }
    )
    for k in [k for k in facts if k.startswith("straggler.") and k not in ("straggler.count", "straggler.ranks")]:
        del facts[k]
    d = decide_facts(facts, build_ruleset())
    assert d.verdict.rule == "IM005" and d.verdict.bottleneck == "imbalance", d.verdict.summary
    im = next(f for f in d.findings if f.rule == "IM005")
    assert im.ranks == [1] and im.fixes[0].title.startswith("Rank 1's samples cost more")
    assert not next(c for c in d.costs if c.rule == "DL001").eligible
    # without the sampler's evidence the same recording is noise (the test above)
    for k in [k for k in facts if k.startswith("python.extra_work")]:
        del facts[k]
    assert decide_facts(facts, build_ruleset()).verdict.rule == "CP001"


def _cost_findings(cm_cost, dl_cost, contended=True):
    from ddpdoctor.rules_engine.engine import Finding

    def f(rule, cat, cost, label):
        return Finding(
            rule=rule,
            name=rule,
            category=cat,
            severity="high",
            title=rule,
            summary="",
            ranks=[0, 1],
            evidence={},
            fixes=[],
            cost=cost,
            agreement=1.0,
            label=label,
        )

    out = [
        f("CM001", "communication", cm_cost, "communication-bound"),
        f("DL003", "dataloader", dl_cost, "dataloader-bound"),
    ]
    if contended:
        out.append(f("IM004", "imbalance", None, "host contention"))
    return out


def test_on_a_contended_cpu_host_communication_counts_as_measured():
    """tiny_model_latency (one 2 K-parameter all-reduce per step, gloo): on this 2-CPU host IM004 fires
    (1 CPU per rank) and the profiled all-reduce is 25-45 % of the step; without profiling, skipping
    it (no_sync) made steps 80 % shorter. Counting each collective at its quickest repeat instead
    (withdrawn, docs/DESIGN.md) put it at 4-19 % and lost the verdict: the measured cost stands."""
    from ddpdoctor.rules_engine.verdict import ranked_costs

    facts = {"run.device": "cpu", "run.ranks_analyzed": 2}
    costs = ranked_costs(_cost_findings(0.37, 0.02), facts)
    assert [c.rule for c in costs] == ["CM001", "DL003"]
    assert costs[0].cost == pytest.approx(0.37) and costs[0].material and costs[0].eligible
    # the workload's own larger cost still comes first
    assert ranked_costs(_cost_findings(0.21, 0.31), facts)[0].rule == "DL003"


def test_no_dominant_cost_says_which_costs_were_set_aside_as_noise_and_which_are_small():
    from ddpdoctor.rules_engine.engine import Finding
    from ddpdoctor.rules_engine.undetermined import NOISE, no_dominant_summary
    from ddpdoctor.rules_engine.verdict import Cost

    costs = [
        Cost("IM001", "imbalance", "imbalance-bound", 0.213, True, False, f"late on a contended host: {NOISE}"),
        Cost("CM001", "communication", "communication-bound", 0.107, True, False, f"seen on rank 1 only: {NOISE}"),
        Cost("DL001", "dataloader", "dataloader-bound", 0.02, False, True, "below the materiality"),
    ]
    contention = Finding(
        rule="IM004",
        name="host.contention",
        category="imbalance",
        severity="medium",
        title="contended",
        summary="",
        ranks=[],
        evidence={},
        fixes=[],
    )
    text = no_dominant_summary(costs, [contention], VERDICT)
    # a 21 % cost set aside as noise is not called small (it was, before)
    assert (
        "set aside as machine noise on a contended host (imbalance-bound 21.3%, communication-bound 10.7%; see IM004"
        in text
    )
    assert "what else the rules found stays small (dataloader-bound 2.0%)" in text
    only_small = no_dominant_summary(costs[2:], [], VERDICT)
    assert only_small.startswith("no dominant avoidable cost: what the rules found stays small (dataloader-bound 2.0%)")
    assert "noise" not in only_small


def _periodic_facts(loader_ms, other_ms):
    """Two ranks, 6 steps: every other step waits for new DataLoader workers (rank 1 the longer)."""
    import numpy as np

    from ddpdoctor.expr import Vec

    rows = np.array([0] * 6 + [1] * 6)
    l0 = np.array(loader_ms, float)
    l1 = l0 * np.array([1.0, 1.3] * 3)
    job = np.maximum(l0, l1) + np.array(other_ms, float)
    return {
        "step.step_time": Vec(np.concatenate([job, job]), rows),
        "step.dataloader_wait": Vec(np.concatenate([l0, l1]), rows),
        "run.steps": 6,
    }


def test_step_variation_the_loader_explains_is_not_noise():
    """Steps of 10 and 80 ms because each epoch starts new workers: the variation is the loader's own,
    so the confidence of a dataloader verdict is not cut and no 're-record on an idle host' is said."""
    from ddpdoctor.rules_engine.verdict import calibrate

    steady = [5.0, 5.2, 4.9, 5.1, 5.0, 5.1]
    facts = _periodic_facts([2, 60, 2, 62, 3, 61], steady)
    conf, hints = calibrate(0.8, "DL001", facts, "dataloader")
    assert conf == pytest.approx(0.8) and hints == []
    # the same steps under another verdict: the variation is unexplained, so it is noise to that verdict
    conf, hints = calibrate(0.8, "CP001", facts, "compute")
    assert conf < 0.5 and "step times vary by" in hints[0]
    # a loader verdict whose other time jumps about too: what the loader leaves unexplained still counts
    conf, hints = calibrate(0.8, "DL001", _periodic_facts([2, 60, 2, 62, 3, 61], [5, 30, 4, 2, 28, 6]), "dataloader")
    assert conf < 0.8 and "less the dataloader wait vary by" in hints[0]


def test_a_late_rank_late_in_the_loader_wait_every_rank_pays_is_the_loaders_on_a_contended_host():
    """acc29's miss: workers restarted at each epoch on both ranks, rank 0's restarts slower under a CPU
    burner. Its lateness (68 %) lies in the DataLoader wait every rank pays (61 %): the loader is the
    cause, and the late rank is that cost landing harder on one rank of a contended host."""
    import numpy as np

    from ddpdoctor.expr import Vec
    from ddpdoctor.rules_engine.verdict import diagnose as decide_facts

    facts = _late_loader_facts(
        **{
            "rank.share.dataloader_wait": Vec(np.array([0.75, 0.47]), np.array([0, 1])),
            "straggler.ranks": [0],
            "straggler.rank": 0,
            "straggler.late_share": 0.68,
            "straggler.steps_late": 5,
            "straggler.steps": 5,
        }
    )
    for k in [k for k in facts if k.startswith("python.extra_work")]:
        del facts[k]
    d = decide_facts(facts, build_ruleset())
    assert d.verdict.rule == "DL001", d.verdict.summary
    im = next(c for c in d.costs if c.rule == "IM001")
    assert not im.eligible and "every rank pays (DL001)" in im.why_not
    # the same run on an idle host: still the loader's cost (fixing it removes the lateness), but not noise
    d = decide_facts({k: v for k, v in facts.items() if not k.startswith("host.contention")}, build_ruleset())
    assert d.verdict.rule == "DL001", d.verdict.summary
    im = next(c for c in d.costs if c.rule == "IM001")
    assert not im.eligible and "fixing DL001 removes its lateness too" in im.why_not and "noise" not in im.why_not
    # ... unless the late rank's own batches cost more to load: then its lateness is its own
    own = {"loader.costlier.rank": 0, "loader.costlier.ms_per_step": 200.0, "loader.costlier.ratio": 1.6,
           "loader.costlier.cpu_ms_per_batch": 80.0, "loader.costlier.others_ms_per_batch": 50.0}  # fmt: skip
    d = decide_facts(
        {**{k: v for k, v in facts.items() if not k.startswith("host.contention")}, **own}, build_ruleset()
    )
    assert next(c for c in d.costs if c.rule == "IM001").eligible


def test_lateness_that_moves_between_ranks_is_noise_without_measured_contention():
    """acc30 idle healthy_balanced: nothing else ran (IM004 quiet), yet rank 1 was last in 3 of 5 steps,
    computing the same inputs longer with nothing of its own: the ranks take turns, so it is the scheduler,
    not the workload. The same lateness every step still decides (issue #25's steady late rank)."""
    from ddpdoctor.rules_engine.verdict import diagnose as decide_facts

    rules = build_ruleset()
    quiet = {"host.contention.other_busy_share": 0.0, "straggler.steps_late": 3}
    d = decide_facts(_contended_straggler_facts(**quiet), rules)
    assert not any(f.rule == "IM004" for f in d.findings)
    im = next(c for c in d.costs if c.rule == "IM001")
    assert not im.eligible and "take turns" in im.why_not and "60%" in im.why_not, im.why_not
    assert d.verdict.rule == "CP001", d.verdict.summary
    steady = decide_facts(_contended_straggler_facts(**{**quiet, "straggler.steps_late": 5}), rules)
    assert steady.verdict.rule == "IM001", steady.verdict.summary
    own = decide_facts(
        _contended_straggler_facts(
            **{**quiet, "python.gc.rank": 0, "python.gc.extra_ms_per_step": 18.0, "python.gc.extra_share": 0.18}
        ),
        rules,
    )
    assert own.verdict.rule == "IM001", own.verdict.summary


def test_same_work_slower_on_cpu_cores_shared_by_the_ranks_is_the_host():
    """acc40, nothing else running on the 2-CPU host: healthy_gc_frozen, per_rank_shards and no_distributed_sampler
    each had one rank 8-12 % of the step late in 4-5 of 5 steps, computing the same inputs with 10-13 % more CPU
    time on its training thread (rank 0 twice, rank 1 once). CPU ranks have no device of their own: that is the
    cores they got, not the workload; on GPUs, or with one rank per host, the same lateness still decides."""
    from ddpdoctor.rules_engine.verdict import diagnose as decide_facts

    rules = build_ruleset()
    quiet = {"host.contention.other_busy_share": 0.0, "host.local_world_size": 2}
    d = decide_facts(_contended_straggler_facts(**quiet), rules)
    im = next(c for c in d.costs if c.rule == "IM001")
    assert not im.eligible and "CPU cores its host shares among 2 ranks" in im.why_not, im.why_not
    assert d.verdict.rule == "CP001", d.verdict.summary
    first = next(f for f in d.findings if f.rule == "IM001").fixes[0].title
    assert first == "Rank 0 got slower CPU cores for the same work: pin each rank to its own cores"
    assert decide_facts(_contended_straggler_facts(**{**quiet, "run.device": "gpu"}), rules).verdict.rule == "IM001"
    assert (
        decide_facts(_contended_straggler_facts(**{**quiet, "host.local_world_size": 1}), rules).verdict.rule == "IM001"
    )
    # a cause of its own (uneven inputs) keeps it the verdict
    uneven = decide_facts(_contended_straggler_facts(**{**quiet, "cross.input_shapes": "varying"}), rules)
    assert uneven.verdict.rule == "IM001"
