"""The fact catalogue (rules/facts.toml) against the real producers, both ways; the rule
loader refusing unknown facts; docs/FACTS.md in step with the catalogue."""

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpdoctor.analysis import AnalyzeOptions
from ddpdoctor.bundle.settings import load_bundle_facts
from ddpdoctor.cli import main
from ddpdoctor.diagnosis import run_analyze
from ddpdoctor.fact_catalogue import default_catalogue, markdown
from ddpdoctor.metrics.columns import COLUMNS
from ddpdoctor.rules_engine.facts import DERIVED, merge_facts, trace_facts
from ddpdoctor.rules_engine.registry import load_rules
from ddpdoctor.rules_engine.selftest import case_facts

ROOT = Path(__file__).resolve().parent.parent
REAL = Path(os.environ.get("DDPDOCTOR_REAL_TRACES", ROOT.parent / "shared" / "real_traces"))
CAT = default_catalogue()


def _fp(r):
    return ["a1", "b2", "c3"] if r < 2 else ["a1", "b2", "c4"]


def evidence_bundle(root: Path) -> Path:
    """A two-host `ddpdoctor run` bundle whose settings carry every optional section:
    window evidence (contention, stacks), batch fingerprints, FSDP, accumulation, framework."""
    from tests.test_bundle_facts import settings, write_node
    from tests.test_compile_facts import _settings as compile_settings
    from tests.test_evidence import contention, stacks
    from tests.test_evidence_gil import gc_rec, gil_rec

    per_rank = {}
    for r in range(4):
        s = settings(
            r,
            framework="hf_trainer",
            train={"micro_batches_per_step": 4, "synced_micro_batches_per_step": 1},
            fsdp={
                "kind": "fsdp1",
                "sharding_strategy": "FULL_SHARD",
                "auto_wrap_policy": "size",
                "backward_prefetch": "BACKWARD_PRE",
                "forward_prefetch": False,
                "reshard_after_forward": True,
                "wrapped_modules": 3,
            },
            cpu_affinity=[0, 1],
        )
        s["dataloader"].update(
            batch_fingerprints=_fp(r),
            sharded_by="DistributedSampler" if r else None,
            batches=20,
            returned=20 - (r == 0),
            samples_per_epoch=100,
            dataset_len=100,
            dataset_fingerprint="TensorDataset:100:ab",
        )
        call = {
            "where": "json.dumps in log_state (train.py:52)",
            "ms_per_step": 30.0,
            "gaps": 4,
            "source": "faulthandler",
        }
        job = (
            {
                "job": {
                    "root": "ddpdoctor run",
                    "processes": 6,
                    "cpu_s": 1.5,
                    "runnable_samples": [2, 3],
                    "outside_runnable_samples": [0, 1],
                }
            }
            if r == 0
            else {}
        )  # capture/agent/jobtree.py
        s["evidence"] = {
            "contention": dict(contention(nivcsw=50 + r), own_runnable_samples=[1, 1], **job),
            "stacks": stacks(
                {"main": 20, "write_checkpoint": 30 if r == 0 else 0},
                input_ms=10.0 + r,
                input_where="decode (train.py:30)",
            ),
            # GC pauses on rank 1, a GIL-holding call on rank 2 (capture/agent/gil.py)
            "gc": gc_rec(40.0 if r == 1 else 0.5, full=2 if r == 1 else 0, max_ms=150.0),
            "gil": gil_rec([call] if r == 2 else [], {"gc": 0.0, "call": 30.0 if r == 2 else 0.0, "unnamed": 0.0}),
        }
        s["loader_window"] = {
            "schema": 1,
            "wall_s": 1.0,
            "batches": 20,
            "next_wall_s": 0.5 + 0.05 * r,
            "next_cpu_s": 0.01,
            "num_workers": 2,
            "workers_seen": 2,
            "workers_cpu_s": 0.1,
            "workers_runqueue_s": 0.02 * (r + 1),  # the job's CPU demand (bundle/loader_cpus.py)
            "train_runqueue_s": 0.05,
        }
        # torch.compile recompiling on every rank, a size guard failing (capture/agent/compile.py)
        s.update(
            compile_settings(
                3,
                600.0,
                reasons=[
                    {
                        "guard": "tensor 'x' size mismatch at index 1",
                        "count": 3,
                        "example": "tensor 'x' size mismatch at index 1. expected 57, actual 52",
                    }
                ],
            )
        )
        s["memory"]["peak_reserved_bytes"] = 1000 * (r + 1)
        # the job's own configuration (bundle/job_config.py): anomaly mode timed, float64 parameters, world_size=8
        s["step_time_s"] = {"count": 10, "median": 0.1, "min": 0.09, "max": 0.12, "last": 0.1}
        s["autograd"] = {
            "anomaly_enabled": True,
            "anomaly_check_nan": True,
            "anomaly_us_per_node": 50.0 + r,
            "anomaly_timed_frames": 18,
            "graph_nodes_per_forward": 200,
            "graph_frames_per_forward": 3600,
        }
        s["ddp"].update(param_bytes_by_dtype={"float64": 800}, float64_slowdown=2.0)
        s["init_process_group"] = {"world_size_arg": 8, "rank_arg": r, "env_world_size": 4, "env_rank": r}
        per_rank[r] = s
    write_node(root / "node0", "node0", [0, 1], per_rank=per_rank)
    write_node(root / "node1", "node1", [2, 3], status="failed", exit_code=1, per_rank=per_rank)
    return root


def _inputs():
    dirs = sorted(p for p in (ROOT / "sample_traces").iterdir() if p.is_dir())
    dirs += sorted(p for p in (ROOT / "tests" / "real_logs").iterdir() if p.is_dir())
    dirs += sorted((ROOT / "tests" / "data" / "failure_formats").glob("*.log"))
    if REAL.is_dir():
        dirs += sorted(p for p in REAL.iterdir() if p.is_dir() and any(p.rglob("*.json*")))
    return dirs


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """Every fact name the producers give on the inputs at hand: name -> one input that gave it."""
    seen: dict[str, str] = {}
    for d in _inputs():
        report = run_analyze([str(d)], AnalyzeOptions())
        for k in report.facts:
            seen.setdefault(k, str(d))
    bundle = evidence_bundle(tmp_path_factory.mktemp("bundle"))
    for k in merge_facts(load_bundle_facts([str(bundle)])):
        seen.setdefault(k, "evidence bundle built in the test")
    return seen


def test_the_facts_of_one_sample_and_one_bundle_are_in_the_catalogue(tmp_path):
    """The fast tier's case of the check below: a sample with a verdict and the evidence bundle built here."""
    facts = set(
        run_analyze([str(ROOT / "sample_traces" / "synthetic_gpu_4ranks_dataloader_bound")], AnalyzeOptions()).facts
    )
    facts |= set(merge_facts(load_bundle_facts([str(evidence_bundle(tmp_path))])))
    assert len(facts) > 20 and not sorted(k for k in facts if k not in CAT)


@pytest.mark.slow  # the `produced` fixture analyzes every sample, real log and real trace folder
def test_every_produced_fact_is_in_the_catalogue(produced):
    unknown = sorted(f"{k} (from {src})" for k, src in produced.items() if k not in CAT)
    assert not unknown, f"facts produced but not in rules/facts.toml: {unknown}"


@pytest.mark.slow  # the `produced` fixture analyzes every sample, real log and real trace folder
def test_every_catalogue_entry_is_produced_or_says_why_not(produced):
    if not REAL.is_dir():
        pytest.skip(f"real traces not at {REAL}: some trace facts appear only on them")
    given = {CAT.lookup(k).name for k in produced if k in CAT}
    never = sorted(s.name for s in CAT.specs.values() if s.name not in given and not s.not_produced)
    assert not never, f"catalogue entries no producer gave on the test inputs (add not_produced = why): {never}"
    stale = sorted(s.name for s in CAT.specs.values() if s.name in given and s.not_produced)
    assert not stale, f"entries marked not_produced that are produced: {stale}"


@pytest.mark.slow  # the `produced` fixture analyzes every sample, real log and real trace folder
def test_per_rank_companions_only_where_declared(produced):
    for k in produced:
        if k.endswith(".per_rank") and k not in ("failure.hang.per_rank", "run.steps_completed.per_rank"):
            assert CAT.lookup(k).per_rank, k


def test_column_placeholder_is_the_breakdown():
    assert CAT.placeholders["column"] == [*COLUMNS, *DERIVED]


def test_trace_facts_scope_matches_the_catalogue():
    from ddpdoctor.analysis import analyze
    from ddpdoctor.expr import Vec

    facts = trace_facts(analyze([str(ROOT / "sample_traces" / "synthetic_gpu_8ranks_straggler_rank3")]))
    for k, v in facts.items():
        spec = CAT.lookup(k)
        assert (spec.scope in ("rank", "step")) == isinstance(v, Vec), (k, spec.scope)


def test_every_built_in_rule_and_test_reads_only_catalogue_facts():
    for rule in load_rules().rules.values():
        for case in rule.tests:
            for k in case_facts(case):
                assert k in CAT, (rule.id, case.name, k)


# ------------------------------------------------------------------ the loader refuses unknown facts


def _rule_folder(tmp_path, when="median(rank.share.dataloader_wait) >= limit", fact='"rank.share.dataloader_wait"'):
    d = tmp_path / "myrules"
    d.mkdir()
    (d / "XX001-typo.toml").write_text(f'''id = "XX001"
name = "custom.typo"
category = "dataloader"
severity = "low"
title = "A user rule"
when = "{when}"
summary = "workers: {{config.dataloader.num_workers}}"

[params]
limit = 0.1

[[test]]
name = "fires"
expect = "fire"
[test.facts]
{fact} = [0.5, 0.5]
''')
    return d


@pytest.mark.parametrize("args", [["rules", "list"], ["rules", "test"], ["analyze", "--quiet"]])
def test_a_rule_reading_an_unknown_fact_is_refused(tmp_path, args):
    d = _rule_folder(tmp_path, when="config.dataloader.num_workerz == 0")
    extra = [str(ROOT / "sample_traces" / "synthetic_gpu_4ranks_dataloader_bound")] if args[0] == "analyze" else []
    res = CliRunner().invoke(main, [*args, "--rules", str(d), "--no-config", *extra])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1, res.output
    assert f"{d / 'XX001-typo.toml'}:6: when: unknown fact 'config.dataloader.num_workerz'" in lines[0], lines[0]


def test_a_stored_rule_test_with_an_unknown_fact_is_refused(tmp_path):
    d = _rule_folder(tmp_path, fact='"rank.share.dataloader_waitt"')
    res = CliRunner().invoke(main, ["rules", "test", "--rules", str(d), "--no-config"])
    assert res.exit_code == 2, res.output
    assert f"{d / 'XX001-typo.toml'}:16: test #1 (fires): unknown fact 'rank.share.dataloader_waitt'" in res.output


def test_a_template_reading_an_unknown_fact_is_refused(tmp_path):
    d = _rule_folder(tmp_path)
    p = d / "XX001-typo.toml"
    p.write_text(p.read_text().replace("config.dataloader.num_workers}", "config.dataloader.workers}"))
    res = CliRunner().invoke(main, ["rules", "list", "--rules", str(d), "--no-config"])
    assert res.exit_code == 2 and f"{p}:7: summary: unknown fact 'config.dataloader.workers'" in res.output, res.output


def test_the_same_rule_with_known_facts_loads_and_passes(tmp_path):
    d = _rule_folder(tmp_path)
    res = CliRunner().invoke(main, ["rules", "test", "--rules", str(d), "--no-config"])
    assert "XX001" not in res.output and "FAIL" not in res.output, res.output


# ------------------------------------------------------------------ docs/FACTS.md


def test_docs_facts_md_is_generated_from_the_catalogue():
    doc = (ROOT / "docs" / "FACTS.md").read_text(encoding="utf-8")
    assert doc == markdown(CAT), "docs/FACTS.md is stale: run `ddpdoctor rules facts --markdown > docs/FACTS.md`"


def test_rules_facts_command_prints_the_markdown():
    res = CliRunner().invoke(main, ["rules", "facts", "--markdown"])
    assert res.exit_code == 0 and res.output == markdown(CAT)
    res = CliRunner().invoke(main, ["rules", "facts"])
    assert res.exit_code == 0 and "straggler.late_share" in res.output and "config.dataloader.num_workers" in res.output
