"""`ddpdoctor tune`: from the job's diagnosis, try the settings its fixes name, one at a time against the
current best, keep what is measurably faster, re-diagnose after each kept change, stop when nothing left
predicts a material gain, --max-trials is reached or the budget would be overrun (docs/TUNE.md).

Every trial is an ordinary `run --try` trial (trial/runner.py: interleaved arms, the bootstrap interval of
trial/stats.py) whose two arms both carry the current best settings; its first baseline arm is the run
that already stands for the current best (the baseline capture, or the last kept trial's try arm).
The decisions are plain functions of data (``candidates``, ``decide``, ``fits_budget``, ``cumulative``),
so that they can be tested on trial results built in code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..capture.agent.overrides import OverrideError, parse_change
from . import predict, runner, stats
from .arm_line import arm_report
from .fix_traits import traits

SCHEMA = "ddpdoctor.tune/1"
NOT_SETTINGS = ("failure", "network")  # findings that explain a failed run: tune needs a job that runs


@dataclass
class TuneOptions:
    command: list[str]
    out: Path
    budget_s: float | None = None
    max_trials: int = 6
    allow_numerics: bool = False
    repeat: int | None = None
    warmup: int = 5
    active: int = 5
    steady_within: int | None = None  # `--steady-within` (issue 37); None: the agent's default
    ruleset: object = None  # the rules every run is diagnosed with (--rules/--set/--no-config); None: built-in
    analyze_opts: object = None  # AnalyzeOptions of those diagnoses (--hta); None: the defaults


@dataclass
class Candidate:
    change: dict  # {knob: typed value}, as `--try` parses it
    shown: str  # "dataloader.num_workers=6"
    value: str  # the fix's value as the rule wrote it ("fp16_compress_hook")
    rule: str
    fix: str  # the fix's title
    predicted_speedup: float | None
    predicted_by: str | None
    prediction_note: str
    changes_numerics: bool = False


@dataclass
class State:
    best: dict = field(default_factory=dict)  # the settings kept so far
    values: dict = field(default_factory=dict)  # knob -> the fix's value text, for the patch
    trials: list = field(default_factory=list)
    tried: dict = field(default_factory=dict)  # shown -> trial number
    not_tried: list = field(default_factory=list)
    arms: list = field(default_factory=list)  # (settings, arm record) of every run, for the cumulative
    run_seconds: list = field(default_factory=list)
    stopped: str = ""
    exit_code: int = 0
    best_bundle: str = ""  # the bundle of the run that stands for the best settings (what --report diagnoses)


def threshold() -> float:
    from ..resources import metric_defaults

    return float(metric_defaults()["trial"]["min_predicted_speedup"])  # `tune` takes no --set


def setting_text(knob: str, value) -> str:
    """knob=value as `--try` takes it (a whole float without its .0)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{knob}={value}"


def candidates(report, best: dict, tried: dict, min_speedup: float) -> tuple[list[Candidate], list[dict]]:
    """The settings the diagnosis proposes that `--try` can apply and that were not tried before, one per knob
    (the best predicted, unless that value is in force already), ordered by predicted gain; those left out
    (not in force), each with why."""
    doc = runner.doc_of(report)
    by_knob: dict[str, Candidate] = {}
    left: list[dict] = []
    for f in report.diagnosis.findings:
        if getattr(f, "category", None) in NOT_SETTINGS:
            continue
        for fx in f.fixes:
            if not getattr(fx, "knob", None) or getattr(fx, "value", None) is None:
                continue
            try:
                knob, value = parse_change(f"{fx.knob}={fx.value}")
            except OverrideError as exc:
                left.append({"change": f"{fx.knob}={fx.value}", "rule": f.rule, "why": str(exc)})
                continue
            shown = setting_text(knob, value)
            if shown in tried:
                left.append({"change": shown, "rule": f.rule, "why": f"tried in trial {tried[shown]}"})
                continue
            p = predict.predict({knob: value}, doc)
            c = Candidate(
                {knob: value},
                shown,
                str(fx.value),
                f.rule,
                fx.title,
                p.get("predicted_speedup"),
                p.get("predicted_by"),
                p.get("prediction_note") or "",
                traits(f.rule, fx.knob).changes_numerics,
            )
            old = by_knob.get(knob)
            if old is None or (c.predicted_speedup or 0) > (old.predicted_speedup or 0):
                by_knob[knob] = c
    # the best-predicted value of a knob already in force: the diagnosis asks for no other value of it
    ranked = sorted(
        (c for k, c in by_knob.items() if not (k in best and best[k] == c.change[k])),
        key=lambda c: -(c.predicted_speedup or 0),
    )
    material = [c for c in ranked if (c.predicted_speedup or 0) > min_speedup]
    for c in ranked:
        if c not in material:
            why = (
                f"predicted up to {c.predicted_speedup:.2f}x, not above {min_speedup:.2f}x"
                if c.predicted_speedup
                else f"no predicted gain ({c.prediction_note})"
            )
            left.append({"change": c.shown, "rule": c.rule, "predicted_speedup": c.predicted_speedup, "why": why})
    return material, left


def decide(t: dict, c: Candidate, allow_numerics: bool) -> tuple[bool, str]:
    """Keep the change only when the run with it did not fail, it was applied, and the 95 % interval of
    the speed-up lies above 1; one that changes numerics only with --allow-numerics."""
    arms = t.get("arms") or []
    if any(a.get("interrupted_by") for a in arms):
        return False, "interrupted before the trial ended"
    if t.get("failed_arm"):
        code = next((a["exit_code"] for a in arms if a["arm"] == t["failed_arm"] and a["exit_code"]), None)
        who = "the run with the change" if t["failed_arm"] == "try" else "the run with the current best settings"
        return False, f"{who} failed" + (f" (exit {code})" if code is not None else "")
    skipped = (t.get("applied") or {}).get("skipped") or {}
    done = (t.get("applied") or {}).get("applied") or {}
    missed = [k for k in c.change if k in skipped and k not in done]
    if missed:
        return False, f"not applied: {missed[0]}: {skipped[missed[0]]}"
    if t.get("measured_speedup") is None or not t.get("ci95"):
        return False, "no speed-up measured: an arm recorded no steps"
    if t.get("cut_short"):
        return False, "too few steps: the job ended inside a window that waited for the loader's prefetched batches"
    if t.get("not_steady"):
        return False, "not steady: record more steps (`--active N`); an arm's steps drifted inside its window"
    lo, hi = t["ci95"]
    if lo > 1.0:
        if c.changes_numerics and not allow_numerics:
            return False, "faster, changes numerics: opt in with --allow-numerics"
        return True, "faster: the 95 % interval lies above 1" + (
            "; changes numerics (allowed by --allow-numerics)" if c.changes_numerics else ""
        )
    if hi < 1.0:
        return False, "slower: the 95 % interval lies below 1"
    return False, "no measurable change: the 95 % interval holds 1"


def runs_per_trial(repeat: int) -> int:
    """Captures a trial starts: `repeat` per arm, less the baseline arm that is reused."""
    return 2 * repeat - 1


def next_repeat(opts: TuneOptions, st: State) -> int:
    if opts.repeat:
        return opts.repeat
    done = [t["repeats_per_arm"] for t in st.trials if t.get("repeats_per_arm")]
    return max(2, done[-1]) if done else 2


def fits_budget(elapsed_s: float, budget_s: float | None, run_seconds: list[float], runs: int) -> tuple[bool, float]:
    """Whether a trial of RUNS captures, each as long as the mean of those measured, ends within the budget."""
    if not run_seconds:
        return True, 0.0
    need = runs * sum(run_seconds) / len(run_seconds)
    return budget_s is None or elapsed_s + need <= budget_s, need


def cumulative(arms: list[tuple[dict, dict]], final: dict) -> dict:
    """The final settings against the original job, from every run of each that recorded steps."""
    if not final:
        return {"measured": 1.0, "ci95": None, "note": "no change kept: the final settings are the original job's"}
    seen, orig, best = set(), [], []
    for settings, a in arms:
        if a["bundle"] in seen or a.get("failed") or not a.get("step_times_ms"):
            continue
        seen.add(a["bundle"])
        if not settings:
            orig += a["step_times_ms"]
        elif settings == final:
            best += a["step_times_ms"]
    if not orig or not best:
        return {"measured": None, "ci95": None, "note": "no steps recorded with the original or the final settings"}
    r, lo, hi = stats.speedup(orig, best)
    return {
        "measured": round(r, 3),
        "ci95": [round(lo, 3), round(hi, 3)],
        "original_steps": len(orig),
        "final_steps": len(best),
        "method": "ratio of mean step times, every recorded step of every run with the original settings "
        "against every run with the final ones; bootstrap 95 % interval (trial/stats.py)",
    }


def run_tune(
    opts: TuneOptions, say=print, emit=print, write=None, capture_baseline=None, run_trial=None, clock=time.monotonic
) -> tuple[State, object, object]:
    """The loop. ``write(state, base_report, best_report)`` is called after the baseline and after every
    trial (so Ctrl-C keeps what was measured); the capture functions can be replaced by fakes in tests.
    Returns the state and the original and final diagnoses."""
    capture_baseline = capture_baseline or _capture_baseline
    run_trial = run_trial or runner.run_trial
    write = write or (lambda *_: None)
    st = State()
    t0 = clock()
    say("ddpdoctor: tune: baseline (the job as it is)")
    try:
        rec, base_report = capture_baseline(opts)
    except KeyboardInterrupt:
        st.stopped, st.exit_code = "interrupted by you (Ctrl-C) during the baseline", 130
        return st, None, None
    st.run_seconds.append(clock() - t0)
    for line in arm_report(rec, label="tune: baseline"):  # the job's own output: in the arm's bundle
        say(line)
    st.arms.append(({}, rec))
    best_rec, best_report = rec, base_report
    st.best_bundle = rec["bundle"]
    if rec.get("interrupted_by"):
        st.stopped, st.exit_code = "interrupted by you (Ctrl-C) during the baseline", rec["exit_code"] or 130
    elif rec["exit_code"] != 0:
        st.stopped, st.exit_code = (
            (f"the job failed without any change (exit {rec['exit_code']}); see `ddpdoctor analyze {rec['bundle']}`"),
            rec["exit_code"],
        )
    elif base_report is None or not rec["steps"]:
        st.stopped, st.exit_code = (
            (f"the baseline recorded no steps (see {rec['bundle']}); a smaller --warmup or a longer run is needed"),
            2,
        )
    write(st, base_report, best_report)
    if st.stopped:
        return st, base_report, best_report
    limit = threshold()
    while True:
        cands, st.not_tried = candidates(best_report, st.best, st.tried, limit)
        if not cands:
            st.stopped = "nothing left predicts a material gain"
            break
        if len(st.trials) >= opts.max_trials:
            st.stopped = f"--max-trials {opts.max_trials} reached"
            st.not_tried = [
                {
                    "change": c.shown,
                    "rule": c.rule,
                    "predicted_speedup": c.predicted_speedup,
                    "why": "not tried: --max-trials reached",
                }
                for c in cands
            ] + st.not_tried
            break
        ok, need = fits_budget(clock() - t0, opts.budget_s, st.run_seconds, runs_per_trial(next_repeat(opts, st)))
        if not ok:
            left = max(0.0, opts.budget_s - (clock() - t0))
            st.stopped = (
                f"budget: the next trial needs about {need / 60:.1f} min "
                f"({runs_per_trial(next_repeat(opts, st))} runs), {left / 60:.1f} min left"
            )
            st.not_tried = [
                {
                    "change": c.shown,
                    "rule": c.rule,
                    "predicted_speedup": c.predicted_speedup,
                    "why": "not tried: the budget",
                }
                for c in cands
            ] + st.not_tried
            break
        c = cands[0]
        n = len(st.trials) + 1
        say(f"ddpdoctor: tune: trial {n}: {c.shown}" + (f" (with {_joined(st.best)})" if st.best else ""))
        reports: dict = {}
        started = clock()
        try:
            t = run_trial(
                _trial_options(
                    opts,
                    opts.out / f"trial-{n}",
                    c.change,
                    repeat=opts.repeat,
                    base_changes=dict(st.best),
                    reuse_arm=best_rec,
                    reuse_report=best_report,
                    reports=reports,
                ),
                say=say,
            )
        except KeyboardInterrupt:
            st.stopped, st.exit_code = f"interrupted by you (Ctrl-C) during trial {n}", 130
            break
        fresh = [a for a in t["arms"] if not a.get("reused")]
        if fresh:
            st.run_seconds += [(clock() - started) / len(fresh)] * len(fresh)
        kept, why = decide(t, c, opts.allow_numerics)
        st.tried[c.shown] = n
        st.arms += [({**st.best, **c.change} if a["arm"] == "try" else dict(st.best), a) for a in fresh]
        st.trials.append(_trial_record(n, c, st.best, t, kept, why, clock() - started, opts.out / f"trial-{n}"))
        emit(trial_line(st.trials[-1]))
        if any(a.get("interrupted_by") for a in fresh):
            st.stopped, st.exit_code = f"interrupted by you (Ctrl-C) during trial {n}", 130
        elif t.get("failed_arm") == "baseline":
            st.stopped = "the run with the current best settings failed; no further trial is comparable"
        if kept:
            st.best = {**st.best, **c.change}
            st.values.update({k: c.value for k in c.change})
            last = [a for a in fresh if a["arm"] == "try"][-1]
            best_rec, best_report = last, reports.get(("try", last["repeat"]))
            st.best_bundle = last["bundle"]
            if best_report is None:
                st.stopped = f"the kept run could not be diagnosed again (see {last['bundle']})"
        write(st, base_report, best_report)
        if st.stopped:
            break
    return st, base_report, best_report


def _joined(settings: dict) -> str:
    return ", ".join(setting_text(k, v) for k, v in settings.items())


def _trial_record(
    n: int, c: Candidate, before: dict, t: dict, kept: bool, why: str, seconds: float, folder: Path
) -> dict:
    return {
        "trial": n,
        "change": c.change,
        "shown": c.shown,
        "against": dict(before) or None,
        "rule": c.rule,
        "fix": c.fix,
        "predicted_speedup": c.predicted_speedup,
        "predicted_by": c.predicted_by,
        "prediction_note": c.prediction_note,
        "measured_speedup": t.get("measured_speedup"),
        "ci95": t.get("ci95"),
        "median_speedup": t.get("median_speedup"),
        "kept": kept,
        "why": why,
        "changes_numerics": c.changes_numerics,
        "repeats_per_arm": t.get("repeats_per_arm"),
        "verdict_before": t.get("baseline_verdict"),
        "verdict_with_change": t.get("try_verdict"),
        "folder": str(folder),
        "seconds": round(seconds, 1),
    }


def trial_line(r: dict) -> str:
    """One terminal line per trial."""
    pred = (
        f"predicted up to {r['predicted_speedup']:.2f}x ({r['predicted_by']})"
        if r.get("predicted_speedup")
        else "no prediction"
    )
    if r.get("measured_speedup") is not None and r.get("ci95"):
        lo, hi = r["ci95"]
        meas = f"measured {r['measured_speedup']:.2f}x (95 % {lo:.2f}–{hi:.2f})"
    else:
        meas = "nothing measured"
    return f"trial {r['trial']}: {r['shown']} — {pred}, {meas}: {'kept' if r['kept'] else 'rejected'} ({r['why']})"


def _trial_options(opts: TuneOptions, out: Path, changes: dict | None, **more) -> runner.TrialOptions:
    """A trial (or the baseline capture) of the tune: its command, window and rules in force."""
    return runner.TrialOptions(
        command=opts.command,
        out=out,
        changes=changes,
        warmup=opts.warmup,
        active=opts.active,
        steady_within=opts.steady_within,
        force=True,
        ruleset=opts.ruleset,
        analyze_opts=opts.analyze_opts,
        **more,
    )


def _capture_baseline(opts: TuneOptions):
    """The job as it is, captured and diagnosed once (an ordinary `run` bundle under OUT/baseline)."""
    return runner.capture_arm(_trial_options(opts, opts.out, None), "baseline", 0, None)
