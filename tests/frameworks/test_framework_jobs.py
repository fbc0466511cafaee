"""The client matrix: one small job per framework, each with one injected cause, launched the
framework's documented way under `ddpdoctor run` (2 CPU ranks, gloo).  Asserted: a trace from
every rank, optimizer steps as the unit under gradient accumulation, the accumulation facts, no
false "no DistributedSampler" finding, and the fix phrased in the framework's own settings.
Select with `-m frameworks`; they run in the default suite."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import project_env

pytestmark = [pytest.mark.frameworks, pytest.mark.live]  # real framework jobs under `ddpdoctor run`

ROOT = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).parent / "jobs"
BIN = Path(sys.executable).parent


def _run(out, command, *options):
    env = project_env(dict(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false"))
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--out",
            str(out),
            "--no-analyze",
            "--min-window",
            "0",
            *options,
            "--",
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    return res


class Job:
    def __init__(self, out, res):
        self.out, self.res = Path(out), res
        self.manifest = json.loads((self.out / "manifest.json").read_text())
        self._report = None

    def settings(self, r):
        return json.loads((self.out / "ranks" / f"rank{r}" / "settings.json").read_text())

    @property
    def report(self):
        if self._report is None:
            from ddpdoctor.analysis import AnalyzeOptions
            from ddpdoctor.diagnosis import AnalysisContext, run_analyze
            from ddpdoctor.rules_engine.registry import build_ruleset

            self._report = run_analyze(
                [str(self.out)], AnalyzeOptions(jobs=1, hta="off"), AnalysisContext.of(build_ruleset(use_config=False))
            )
        return self._report

    def finding(self, rule):
        return next((f for f in self.report.diagnosis.findings if f.rule == rule), None)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    cache = {}

    def get(name, command, *options):
        if name not in cache:
            pytest.importorskip("torch")
            out = tmp_path_factory.mktemp(name) / "bundle"
            cache[name] = Job(out, _run(out, command, *options))
        return cache[name]

    return get


def lightning(job):
    pytest.importorskip("lightning")
    return job("lightning", [sys.executable, str(JOBS / "lightning_job.py")])


def hf_trainer(job):
    pytest.importorskip("transformers")
    return job("hf_trainer", [str(BIN / "torchrun"), "--nproc_per_node", "2", str(JOBS / "hf_trainer_job.py")])


def accelerate(job):
    pytest.importorskip("accelerate")
    return job(
        "accelerate",
        [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", str(JOBS / "accelerate_job.py")],
    )


ACCUMULATING = {
    "lightning": (lightning, "Trainer(strategy=DDPStrategy(find_unused_parameters=False))"),
    "hf_trainer": (hf_trainer, "TrainingArguments(..., ddp_find_unused_parameters=False)"),
    "accelerate": (
        accelerate,
        "Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=False)])",
    ),
}


@pytest.mark.parametrize("framework", sorted(ACCUMULATING))
def test_every_rank_traced_with_optimizer_steps_under_accumulation(job, framework):
    j = ACCUMULATING[framework][0](job)
    m = j.manifest
    assert m["status"] == "complete" and m["world_size"] == 2 and m["ranks_present"] == [0, 1], m
    for r in (0, 1):
        s = j.settings(r)
        assert s["rank"] == r and s["world_size"] == 2
        assert s["framework"] == framework
        assert s["step_source"] == "optimizer" and s["steps_completed"] == 10  # 5 warm-up + 5 recorded
        assert s["window"]["complete"] and s["window"]["recorded_steps"] == 5
        assert s["train"]["micro_batches_per_step"] == 4.0
        assert s["train"]["synced_micro_batches_per_step"] == 1.0  # no_sync on 3 of 4 micro-batches
        assert s["exit"] == {"code": 0, "reason": "window complete"}
    facts = j.report.facts
    assert facts["run.framework"] == framework and facts["train.micro_batches_per_step"] == 4.0
    assert facts["train.synced_micro_batches_per_step"] == 1.0


@pytest.mark.parametrize("framework", sorted(ACCUMULATING))
def test_sharding_is_recognised_and_no_false_sampler_finding(job, framework):
    j = ACCUMULATING[framework][0](job)
    expected = {
        "lightning": "DistributedSampler",
        "hf_trainer": "BatchSamplerShard",
        "accelerate": "BatchSamplerShard",
    }[framework]
    assert j.settings(0)["dataloader"]["sharded_by"] == expected
    assert j.finding("CF001") is None


@pytest.mark.parametrize("framework", sorted(ACCUMULATING))
def test_injected_cause_is_found_and_fixed_in_the_frameworks_settings(job, framework):
    fn, setting = ACCUMULATING[framework]
    f = fn(job).finding("CF003")
    assert f is not None, "find_unused_parameters=True with every parameter used"
    fix = f.fixes[0]
    assert fix.framework == framework
    assert fix.change.splitlines()[0].endswith(setting)


def test_accelerate_cpu_launch_runs_one_process_and_the_bundle_says_so(job):
    pytest.importorskip("accelerate")
    j = job(
        "accelerate_cpu",
        [str(BIN / "accelerate"), "launch", "--cpu", "--num_processes", "2", str(JOBS / "accelerate_job.py")],
    )
    assert j.manifest["ranks_present"] == [0] and j.manifest["world_size"] == 1
    assert any("asked for 2 processes but 1 rank ran" in n for n in j.manifest["notes"])
    assert "asked for 2 processes" in j.res.stderr
    assert j.settings(0)["framework"] == "accelerate" and j.settings(0)["step_source"] == "optimizer"


@pytest.mark.parametrize("kind", ["fsdp1", "fsdp2"])
def test_fsdp_collectives_settings_and_the_late_rank(job, kind):
    j = job(kind, [str(BIN / "torchrun"), "--nproc_per_node", "2", str(JOBS / "fsdp_job.py"), kind])
    assert j.manifest["ranks_present"] == [0, 1] and j.manifest["status"] == "complete"
    s = j.settings(0)
    assert s["fsdp"]["kind"] == kind and s["fsdp"]["wrapped_modules"] == 3  # two blocks and the root
    if kind == "fsdp1":
        assert s["fsdp"]["sharding_strategy"] == "FULL_SHARD"
        assert s["fsdp"]["auto_wrap_policy"] == "ModuleWrapPolicy"
    else:
        assert s["fsdp"]["reshard_after_forward"] is True
    a = j.report.analysis
    for summary in a.summaries:
        assert set(summary.collectives.kind) == {"all_gather", "reduce_scatter"}
        waits, steps = summary.values["comm_sync_wait"], summary.values["step_time"]
        assert all(w <= t for w, t in zip(waits, steps))
    # rank 1's sequences are 16x longer: it is the late one, not rank 0 (first at the tiny all-gathers)
    assert a.cross.arrival_late_us[1] > 0 > a.cross.arrival_late_us[0]
    assert [st.rank for st in a.cross.stragglers] in ([1], [])
    trace_events = [
        json.loads(line)
        for line in (j.out / "ranks" / "rank0" / "events.jsonl").read_text().splitlines()
        if '"kind": "trace"' in line
    ]
    assert trace_events and trace_events[0]["compress_s"] < 1.0
