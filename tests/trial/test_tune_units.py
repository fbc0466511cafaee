"""`ddpdoctor tune`: which settings are tried and in what order, the keep / reject decision, the stop rules,
the cumulative speed-up and tune.json's patch, on diagnoses and trial results built here (no job runs)."""

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddpdoctor.rules_engine.model import RuleError, parse_rule
from ddpdoctor.trial import tune, tune_report
from ddpdoctor.trial.tune import Candidate, TuneOptions

ROOT = Path(__file__).resolve().parents[2]


def _fix(knob, value, title=None):
    return SimpleNamespace(knob=knob, value=value, title=title or f"set {knob}")


def _finding(rule, speedup, fixes, category="dataloader", evidence=None):
    return SimpleNamespace(
        rule=rule,
        title=f"{rule} title",
        category=category,
        expected_speedup=speedup,
        cost=1 - 1 / speedup if speedup else None,
        evidence=evidence or {},
        fixes=fixes,
    )


def _report(findings, label="dataloader-bound", framework=None):
    verdict = SimpleNamespace(
        bottleneck=label.split("-")[0],
        label=label,
        summary=f"{label}: …",
        rule=None,
        expected_speedup=None,
        failed=False,
    )
    facts = {"run.device": "cpu"}
    if framework:
        facts["run.framework"] = framework
    return SimpleNamespace(diagnosis=SimpleNamespace(findings=findings, verdict=verdict), facts=facts)


def test_candidates_are_the_tryable_settings_by_predicted_gain_one_per_knob():
    rep = _report(
        [
            _finding(
                "DL001",
                3.0,
                [
                    _fix("dataloader.num_workers", "6"),
                    _fix(None, None, "make batches cheaper"),
                    _fix("dataloader.persistent_workers", "True"),
                ],
            ),
            _finding("DL003", 1.5, [_fix("dataloader.num_workers", "4")]),  # same knob, smaller gain: dropped
            _finding(
                "CM001",
                1.4,
                [_fix("ddp.comm_hook", "fp16_compress_hook"), _fix("train.gradient_accumulation_steps", "8")],
                category="communication",
            ),
            _finding("CF004", 1.02, [_fix("env.OMP_NUM_THREADS", "1")], category="config"),  # not material
            _finding("NET005", 9.0, [_fix("env.NCCL_SOCKET_IFNAME", "eth0")], category="failure"),  # a failed run's
        ]
    )
    cands, left = tune.candidates(rep, best={}, tried={}, min_speedup=1.05)
    assert [c.shown for c in cands] == [
        "dataloader.num_workers=6",
        "dataloader.persistent_workers=True",
        "ddp.comm_hook=fp16",
    ]
    assert cands[0].predicted_by == "DL001" and cands[0].predicted_speedup == 3.0 and cands[0].value == "6"
    # declared on CM001's [[fix]] (changes_numerics = true), not by a list of knobs in Python
    assert [c.changes_numerics for c in cands] == [False, False, True]
    why = {x["change"]: x["why"] for x in left}
    assert "change to the code" in why["train.gradient_accumulation_steps=8"]
    assert "not above 1.05x" in why["env.OMP_NUM_THREADS=1"]
    assert not any("NCCL_SOCKET_IFNAME" in x["change"] for x in left)
    # a setting in force is not proposed again; one already tried is listed with its trial
    cands, left = tune.candidates(
        rep, best={"dataloader.num_workers": 6}, tried={"dataloader.persistent_workers=True": 2}, min_speedup=1.05
    )
    assert [c.shown for c in cands] == ["ddp.comm_hook=fp16"]
    assert {"change": "dataloader.persistent_workers=True", "rule": "DL001", "why": "tried in trial 2"} in left


def _trial(speedup=None, ci=None, failed_arm=None, applied=None, arms=None):
    return {
        "measured_speedup": speedup,
        "ci95": ci,
        "failed_arm": failed_arm,
        "applied": applied,
        "arms": arms or [],
        "repeats_per_arm": 2,
    }


def _cand(shown="dataloader.num_workers=4", numerics=False):
    knob, _, value = shown.partition("=")
    return Candidate({knob: value}, shown, value, "DL001", "fix", 2.0, "DL001", "", numerics)


def test_a_change_is_kept_only_when_its_interval_lies_above_1_and_the_run_did_not_fail():
    assert tune.decide(_trial(1.8, [1.3, 2.4]), _cand(), False) == (True, "faster: the 95 % interval lies above 1")
    assert tune.decide(_trial(1.1, [0.97, 1.25]), _cand(), False) == (
        False,
        "no measurable change: the 95 % interval holds 1",
    )
    assert tune.decide(_trial(0.8, [0.7, 0.9]), _cand(), False)[1].startswith("slower")
    kept, why = tune.decide(_trial(failed_arm="try", arms=[{"arm": "try", "exit_code": 134}]), _cand(), False)
    assert not kept and why == "the run with the change failed (exit 134)"
    # the job's loader took no such argument: nothing was tried, whatever the timing says
    skipped = {"applied": {}, "skipped": {"dataloader.num_workers": "MyLoader takes no num_workers argument"}}
    kept, why = tune.decide(_trial(1.5, [1.2, 1.9], applied=skipped), _cand(), False)
    assert not kept and why.startswith("not applied: dataloader.num_workers: MyLoader")
    assert tune.decide(_trial(None, None), _cand(), False)[0] is False
    # Ctrl-C reached the ranks of the try arm (exit 130): not a failure of the change
    stopped = [{"arm": "try", "exit_code": 130, "interrupted_by": "SIGINT"}]
    assert tune.decide(_trial(failed_arm="try", arms=stopped), _cand(), False) == (
        False,
        "interrupted before the trial ended",
    )


def test_a_faster_change_of_numerics_is_listed_never_kept_without_opt_in():
    c = _cand("ddp.comm_hook=fp16", numerics=True)
    assert tune.decide(_trial(1.4, [1.2, 1.6]), c, False) == (
        False,
        "faster, changes numerics: opt in with --allow-numerics",
    )
    kept, why = tune.decide(_trial(1.4, [1.2, 1.6]), c, True)
    assert kept and "allowed by --allow-numerics" in why
    # not faster: rejected for that, the numerics are beside the point
    assert tune.decide(_trial(1.0, [0.9, 1.1]), c, False)[1].startswith("no measurable change")


def test_the_budget_counts_the_runs_a_trial_starts_at_the_measured_pace():
    assert tune.runs_per_trial(2) == 3 and tune.runs_per_trial(3) == 5  # baseline #1 is reused
    assert tune.fits_budget(100, 200, [20, 30], 3) == (True, 75.0)
    assert tune.fits_budget(150, 200, [20, 30], 3) == (False, 75.0)
    assert tune.fits_budget(150, None, [20, 30], 3)[0] is True
    assert tune.fits_budget(0, 10, [], 3)[0] is True  # nothing measured yet


def _arm(bundle, times, arm="baseline", failed=False):
    return {"arm": arm, "bundle": bundle, "step_times_ms": times, "failed": failed}


def test_cumulative_speedup_pools_the_original_and_the_final_settings_runs():
    w = {"dataloader.num_workers": 4}
    arms = [
        ({}, _arm("b0", [30, 32, 31])),
        ({}, _arm("b2", [29, 33, 30])),
        (w, _arm("t1", [10, 11, 10], "try")),
        (w, _arm("t1", [10, 11, 10], "try")),  # the same run twice
        ({**w, "ddp.bucket_cap_mb": 1}, _arm("t3", [9, 9, 9], "try")),
        (w, _arm("bx", [99], failed=True)),
    ]
    c = tune.cumulative(arms, w)
    assert c["measured"] == pytest.approx(sum([30, 32, 31, 29, 33, 30]) / 6 / (31 / 3), rel=1e-3)
    assert c["original_steps"] == 6 and c["final_steps"] == 3 and c["ci95"][0] > 2
    assert tune.cumulative(arms, {})["measured"] == 1.0 and "no change kept" in tune.cumulative(arms, {})["note"]


class FakeJob:
    """Trials answered from a table of {shown change: (speed-up, interval)}; each kept change's run is
    re-diagnosed as NEXT[shown] (the bottleneck moves)."""

    def __init__(self, results, next_reports, first, fail_baseline=False):
        self.results, self.next_reports, self.first, self.fail = results, next_reports, first, fail_baseline
        self.calls = []
        self.best_ms = 30.0  # the job's step with the settings kept so far

    def baseline(self, opts):
        rec = {
            "arm": "baseline",
            "repeat": 0,
            "bundle": "B0",
            "exit_code": 3 if self.fail else 0,
            "steps": 4,
            "step_times_ms": [30.0] * 4,
            "failed": self.fail,
            "interrupted_by": None,
        }
        return rec, self.first

    def trial(self, topts, say=None):
        self.calls.append(topts)
        shown = ", ".join(tune.setting_text(k, v) for k, v in topts.changes.items())
        res = self.results[shown]
        if res == "ctrl-c":
            raise KeyboardInterrupt
        if res == "sigint-in-ranks":  # Ctrl-C while a run was going: run_capture returns 130
            arm = {
                "arm": "try",
                "repeat": 1,
                "bundle": "Tx",
                "step_times_ms": [],
                "failed": True,
                "exit_code": 130,
                "interrupted_by": "SIGINT",
            }
            return {
                "measured_speedup": None,
                "ci95": None,
                "failed_arm": "try",
                "applied": None,
                "arms": [dict(topts.reuse_arm, arm="baseline", repeat=1, reused=True), arm],
            }
        speed, ci = res
        n = len(self.calls)
        base_ms, try_ms = self.best_ms, self.best_ms / speed
        arms = [
            dict(topts.reuse_arm, arm="baseline", repeat=1, reused=True),
            {"arm": "try", "repeat": 1, "bundle": f"T{n}a", "step_times_ms": [try_ms] * 4, "failed": False},
            {"arm": "try", "repeat": 2, "bundle": f"T{n}b", "step_times_ms": [try_ms] * 4, "failed": False},
            {"arm": "baseline", "repeat": 2, "bundle": f"B{n}", "step_times_ms": [base_ms] * 4, "failed": False},
        ]
        if ci[0] > 1:
            self.best_ms = try_ms
        topts.reports[("try", 2)] = self.next_reports.get(shown)
        return {
            "measured_speedup": speed,
            "ci95": list(ci),
            "failed_arm": None,
            "applied": None,
            "arms": arms,
            "repeats_per_arm": 2,
            "baseline_verdict": "x",
            "try_verdict": "y",
        }


def _opts(tmp_path, **kw):
    return TuneOptions(command=["torchrun", "train.py"], out=tmp_path, **kw)


def _run(job, opts, clock=None):
    lines = []
    st, base, best = tune.run_tune(
        opts,
        say=lambda m: None,
        emit=lines.append,
        capture_baseline=job.baseline,
        run_trial=job.trial,
        clock=clock or iter(range(0, 10_000, 10)).__next__,
    )
    return st, base, best, lines


def test_the_loop_keeps_rediagnoses_and_stops_when_nothing_material_is_left(tmp_path):
    first = _report(
        [
            _finding("DL001", 4.0, [_fix("dataloader.num_workers", "6")]),
            _finding("CM001", 1.3, [_fix("ddp.bucket_cap_mb", "100")], category="communication"),
        ]
    )
    # after 6 workers the loader wait is gone: the bucket change is what is left, then nothing
    moved = _report(
        [_finding("CM001", 1.3, [_fix("ddp.bucket_cap_mb", "100")], category="communication")],
        label="communication-bound",
    )
    job = FakeJob(
        {"dataloader.num_workers=6": (2.0, (1.5, 2.6)), "ddp.bucket_cap_mb=100": (1.02, (0.9, 1.1))},
        {"dataloader.num_workers=6": moved},
        first,
    )
    st, base, best, lines = _run(job, _opts(tmp_path))
    assert [(t["shown"], t["kept"]) for t in st.trials] == [
        ("dataloader.num_workers=6", True),
        ("ddp.bucket_cap_mb=100", False),
    ]
    # the second trial runs against the new best, and reuses the kept run as its first baseline arm
    assert job.calls[1].base_changes == {"dataloader.num_workers": 6} and job.calls[1].reuse_arm["bundle"] == "T1b"
    assert job.calls[1].reuse_report is moved and best is moved and base is first
    assert st.best == {"dataloader.num_workers": 6} and st.stopped == "nothing left predicts a material gain"
    assert lines[0].startswith(
        "trial 1: dataloader.num_workers=6 — predicted up to 4.00x (DL001), measured 2.00x (95 % 1.50–2.60): kept"
    )
    assert "rejected (no measurable change" in lines[1]
    doc = tune_report.document(_opts(tmp_path), st, base, best, 12.0)
    assert doc["schema"] == "ddpdoctor.tune/1" and doc["cumulative_speedup"]["measured"] == pytest.approx(2.0)
    assert {"change", "predicted_speedup", "measured_speedup", "ci95", "kept", "why"} <= set(doc["trials"][0])
    assert doc["patch"]["lines"] == ["DataLoader(..., num_workers=6)"]
    assert tune_report.final_line(doc).startswith(
        "measured 2.00x faster with: dataloader.num_workers=6 (DataLoader(..., num_workers=6)); 95 % "
    )


def test_max_trials_budget_and_ctrl_c_stop_the_loop_and_keep_what_was_measured(tmp_path):
    first = _report(
        [
            _finding("DL001", 4.0, [_fix("dataloader.num_workers", "6")]),
            _finding("CM001", 1.3, [_fix("ddp.bucket_cap_mb", "100")], category="communication"),
        ]
    )
    results = {"dataloader.num_workers=6": (1.0, (0.9, 1.1)), "ddp.bucket_cap_mb=100": (1.5, (1.2, 1.8))}
    st, *_ = _run(FakeJob(results, {}, first), _opts(tmp_path, max_trials=1))
    assert len(st.trials) == 1 and st.stopped == "--max-trials 1 reached"
    assert st.not_tried[0] == {
        "change": "ddp.bucket_cap_mb=100",
        "rule": "CM001",
        "predicted_speedup": 1.3,
        "why": "not tried: --max-trials reached",
    }
    # each capture "takes" 100 s (a fake clock): the baseline leaves 50 s of 150, a trial needs 3 runs
    ticks = iter([0, 100] + [100] * 50)
    st, *_ = _run(FakeJob(results, {}, first), _opts(tmp_path, budget_s=150), clock=ticks.__next__)
    assert st.trials == [] and st.stopped.startswith("budget: the next trial needs about 5.0 min (3 runs)")
    results["ddp.bucket_cap_mb=100"] = "ctrl-c"
    st, *_ = _run(FakeJob(results, {}, first), _opts(tmp_path))
    assert st.exit_code == 130 and "interrupted" in st.stopped and len(st.trials) == 1
    results["ddp.bucket_cap_mb=100"] = "sigint-in-ranks"
    st, *_ = _run(FakeJob(results, {}, first), _opts(tmp_path))
    assert st.exit_code == 130 and st.stopped == "interrupted by you (Ctrl-C) during trial 2"
    assert [t["why"] for t in st.trials][-1] == "interrupted before the trial ended"


def test_a_failed_baseline_stops_before_any_trial_with_the_jobs_exit_code(tmp_path):
    job = FakeJob({}, {}, _report([]), fail_baseline=True)
    st, *_ = _run(job, _opts(tmp_path))
    assert st.exit_code == 3 and "failed without any change" in st.stopped and not job.calls


def test_nothing_helped_says_which_code_change_the_diagnosis_recommends(tmp_path):
    accum = _report(
        [
            _finding(
                "CM001",
                1.33,
                [
                    _fix(
                        None, None, "Gradient accumulation without no_sync(): 8 gradient all-reduces per optimizer step"
                    )
                ],
                category="communication",
            )
        ],
        label="communication-bound",
    )
    st, base, best, lines = _run(FakeJob({}, {}, accum), _opts(tmp_path))
    assert st.trials == [] and lines == [] and st.exit_code == 0
    line = tune_report.final_line(tune_report.document(_opts(tmp_path), st, base, best, 1.0))
    assert line == (
        "no setting to try: none of the diagnosis's fixes is a setting `--try` can apply with a "
        "predicted gain above 1.05x; it recommends a code change instead: [CM001] Gradient "
        "accumulation without no_sync(): 8 gradient all-reduces per optimizer step"
    )
    # the verdict's finding speaks first, whatever the order of the findings
    noisy = _report(
        [
            _finding("IM004", 1.2, [_fix(None, None, "Re-record on an idle host")], category="imbalance"),
            *accum.diagnosis.findings,
        ],
        label="communication-bound",
    )
    noisy.diagnosis.verdict.rule = "CM001"
    assert tune_report.code_advice(noisy).startswith("[CM001] Gradient accumulation without no_sync()")
    stopped = tune.State(
        trials=[{"kept": False, "why": "interrupted before the trial ended", "shown": "x=1"}], exit_code=130
    )
    assert tune_report.final_line(tune_report.document(_opts(tmp_path), stopped, base, best, 1.0)) == (
        "interrupted before any change was kept; what was measured is in tune.json"
    )
    rejected = tune.State(trials=[{"kept": False, "why": "no measurable change", "shown": "x=1"}])
    doc = tune_report.document(_opts(tmp_path), rejected, base, best, 1.0)
    assert tune_report.final_line(doc).startswith(
        "no setting made this job measurably faster (1 setting tried); it recommends a code change instead: [CM001]"
    )


def test_the_patch_is_written_in_the_frameworks_own_terms():
    s = {"dataloader.num_workers": 4, "ddp.bucket_cap_mb": 1.0, "env.NCCL_ALGO": "Ring", "ddp.comm_hook": "fp16"}
    values = {"ddp.comm_hook": "fp16_compress_hook"}
    hf = tune_report.patch(s, values, "hf_trainer")
    assert hf["framework_name"] == "Hugging Face Trainer"
    assert "TrainingArguments(..., dataloader_num_workers=4)" in hf["lines"]
    assert "TrainingArguments(..., ddp_bucket_cap_mb=1)" in hf["lines"]
    assert hf["environment"] == {"NCCL_ALGO": "Ring"} and hf["lines"][-1].startswith("export NCCL_ALGO=Ring")
    lightning = tune_report.patch({"ddp.bucket_cap_mb": 50.0}, {}, "lightning")
    assert lightning["lines"] == ["Trainer(strategy=DDPStrategy(bucket_cap_mb=50))"]
    raw = tune_report.patch(s, values, None)
    assert raw["framework"] == "pytorch" and "DistributedDataParallel(model, ..., bucket_cap_mb=1)" in raw["lines"]
    assert any("default_hooks.fp16_compress_hook" in ln for ln in raw["lines"])


RULE = """id = "ZZ001"
name = "test.rule"
category = "dataloader"
severity = "low"
title = "t"
when = "true"
summary = "s"
[[fix]]
title = "f"
change = "c"
"""


def test_the_fix_keys_are_checked_where_the_rule_is_loaded():
    ok = parse_rule(
        __import__("tomllib").loads(
            RULE + 'knob = "ddp.comm_hook"\nvalue = "fp16"\npredict = "halved_bytes"\nchanges_numerics = true\n'
        ),
        Path("r.toml"),
        RULE,
    )
    assert ok.fixes[0].predict == "halved_bytes" and ok.fixes[0].changes_numerics is True
    for extra, words in (
        ('knob = "ddp.comm_hook"\nvalue = "x"\npredict = "guess"\n', "predict 'guess' is not one of"),
        ("changes_numerics = true\n", "needs a 'knob'"),
        ('knob = "ddp.comm_hook"\nvalue = "x"\nchanges_numerics = "yes"\n', "true or false"),
    ):
        with pytest.raises(RuleError, match=re.escape(words)):
            parse_rule(__import__("tomllib").loads(RULE + extra), Path("r.toml"), RULE + extra)


@pytest.mark.live
def test_try_takes_rule_ids_of_four_letters(tmp_path):
    """NET001 is a rule id like DL001: two of them are refused as such, not as a malformed KEY=VALUE."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--try",
            "NET001",
            "--try",
            "DL001",
            "--out",
            str(tmp_path / "o"),
            "--",
            sys.executable,
            "-c",
            "pass",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "give it alone" in res.stderr, res.stderr


@pytest.mark.live
def test_tune_refuses_bad_input_in_one_line(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    for args, words in (
        (["--"], "no command to tune"),
        (["--out", str(tmp_path / "full"), "--", "true"], "already exists"),
        (["--out", str(tmp_path / "full"), "--force", "--", "true"], "not a ddpdoctor tune folder"),
        (["--", "no-such-launcher-here"], "command not found"),
    ):
        res = subprocess.run(
            [sys.executable, "-m", "ddpdoctor", "tune", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        assert res.returncode == 2, (args, res.stderr)
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and words in lines[0], (args, res.stderr)
    assert (tmp_path / "full" / "x").read_text() == "keep me"
    # click's own check of an option's range (exit 2, as for every command)
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "tune", "--max-trials", "0", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert res.returncode == 2 and "Invalid value for '--max-trials'" in res.stderr


def test_the_rules_in_force_reach_every_diagnosis_of_a_tune_and_a_trial(tmp_path):
    """`tune --set/--rules/--no-config/--hta` (issue 41): the options travel to every trial, and an arm is
    diagnosed with them (here a straggler threshold above rank 1's lateness: no steady straggler is named)."""
    from ddpdoctor.analysis import AnalyzeOptions
    from ddpdoctor.rules_engine.registry import build_ruleset
    from ddpdoctor.trial import runner

    first = _report([_finding("DL001", 4.0, [_fix("dataloader.num_workers", "6")])])
    job = FakeJob({"dataloader.num_workers=6": (2.0, (1.5, 2.6))}, {"dataloader.num_workers=6": first}, first)
    marker, hta = object(), AnalyzeOptions(hta="off")
    st, *_ = _run(job, _opts(tmp_path, max_trials=1, ruleset=marker, analyze_opts=hta))
    assert job.calls and all(c.ruleset is marker and c.analyze_opts is hta for c in job.calls)
    assert st.best_bundle == "T1b"  # the kept run: what `tune --report` diagnoses

    bundle = Path(__file__).resolve().parents[2] / "sample_traces" / "capture_gloo_2ranks_slow_rank"
    strict = build_ruleset([], ["metrics.straggler.min_late_share=0.95"], use_config=False)

    def rules(opts):
        return [f.rule for f in runner._diagnose(bundle, opts).diagnosis.findings]

    plain = runner.TrialOptions(command=["x"], out=tmp_path, changes=None, analyze_opts=hta)
    assert "IM001" in rules(plain)
    assert "IM001" not in rules(runner.TrialOptions(command=["x"], out=tmp_path, changes=None, ruleset=strict))
