"""Run the job as it is (baseline) and with the tried change (treatment), interleaved, and compare.

Every arm is an ordinary `ddpdoctor run` bundle under ``OUT/<arm>-<n>`` recorded the same way (same
--warmup / --active window); arms alternate in ABBA order so a drift of the machine hits both. The
speed-up is mean(baseline step) / mean(treatment step) over all recorded steps of each arm (a step's
time is its slowest rank's; the mean is the job's time per step, so a cost paid at every epoch start
counts), with a bootstrap 95 % interval; the ratio of medians (the typical step) is reported beside
it. The prediction is the upper bound of the baseline finding whose fixes change the same setting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..capture.host.launcher import RunOptions, run_capture
from ..errors import InputError
from . import predict, stats
from .arm_line import arm_report

SCHEMA = "ddpdoctor.trial/1"
# the summary line adds the median step's speed-up when it is this far (either way) from the mean's
SHOW_MEDIAN_APART = 1.15


@dataclass
class TrialOptions:
    command: list[str]
    out: Path
    changes: dict | None  # None with rule set: taken from the baseline's diagnosis
    rule: str | None = None  # `--try RULE`
    repeat: int | None = None  # per arm; None: chosen from the noise of the first pair
    baseline: Path | None = None  # an existing bundle as the baseline arm
    warmup: int = 5
    active: int = 5
    steady_within: int | None = None  # `--steady-within` (issue 37); None: the agent's default
    force: bool = False
    # `ddpdoctor tune`: settings both arms run with (the current best), an arm already recorded with them
    # that stands as baseline #1 (with its diagnosis), and where each arm's diagnosis is kept for the caller
    base_changes: dict | None = None
    reuse_arm: dict | None = None
    reuse_report: object = None
    reports: dict | None = None
    # the rules and analysis options every arm is diagnosed with (--rules/--set/--no-config, --hta);
    # None: the built-in rules and the defaults
    ruleset: object = None
    analyze_opts: object = None


def _diagnose(bundle: Path, opts: TrialOptions):
    from ..diagnosis import AnalysisContext, run_analyze

    return run_analyze([str(bundle)], opts.analyze_opts, AnalysisContext.of(opts.ruleset))


def _arm_record(
    arm: str, n: int, bundle: Path, exit_code: int, status: str, report, interrupted_by=None, died_after_end=False
) -> dict:
    times = stats.job_step_times_us(report.analysis.summaries) if report and report.analysis else []
    v = report.diagnosis.verdict if report else None
    return {
        "arm": arm,
        "repeat": n,
        "bundle": str(bundle),
        "exit_code": exit_code,
        "status": status,
        "steps": len(times),
        "step_times_ms": [round(t / 1000, 3) for t in times],
        "verdict": getattr(v, "bottleneck", None),
        "label": getattr(v, "label", None),
        # a job that exits non-zero only because a process died after its program ended (the manifest's
        # died_after_program_end) measured its steps: the arm counts
        "failed": bool(getattr(v, "failed", False)) or (exit_code != 0 and not died_after_end),
        "interrupted_by": interrupted_by,
    }


def change_from_rule(rule: str, report) -> dict:
    """The first fix of RULE in the baseline's diagnosis, as a change `run` can apply."""
    from ..capture.agent.overrides import OverrideError, parse_change

    f = next((f for f in report.diagnosis.findings if f.rule == rule), None)
    if f is None:
        raise InputError(f"--try {rule}: the baseline's diagnosis has no {rule} finding; nothing to try")
    for fx in f.fixes:
        if fx.knob and fx.value is not None:
            try:
                k, v = parse_change(f"{fx.knob}={fx.value}")
            except OverrideError as exc:
                raise InputError(f"--try {rule}: its first fix ({fx.title}) {exc}") from None
            return {k: v}
        raise InputError(
            f"--try {rule}: its first fix ({fx.title}) is a change to the code or the host, not a setting run can apply"
        )
    raise InputError(f"--try {rule}: the finding has no fix")


def prediction(changes: dict, report) -> dict:
    """The prediction for these settings from the baseline's diagnosis (trial/predict.py reads the same
    fields of the diagnosis document, so the card and the trial agree)."""
    return predict.predict(changes, doc_of(report))


def doc_of(report) -> dict:
    """The fields of the diagnosis document a prediction reads, from a live report."""

    def fix(x):
        return {"knob": getattr(x, "knob", None), "value": getattr(x, "value", None), "title": getattr(x, "title", "")}

    findings = [
        {
            "rule": f.rule,
            "title": getattr(f, "title", ""),
            "category": getattr(f, "category", None),
            "expected_speedup": getattr(f, "expected_speedup", None),
            "cost": getattr(f, "cost", None),
            "evidence": getattr(f, "evidence", None) or {},
            "fixes": [fix(x) for x in getattr(f, "fixes", [])],
        }
        for f in report.diagnosis.findings
    ]
    return {"findings": findings, "facts": getattr(report, "facts", None) or {}}


def capture_arm(opts: TrialOptions, arm: str, n: int, changes: dict | None) -> tuple[dict, object]:
    bundle = opts.out / f"{arm}-{n}"
    res = run_capture(
        RunOptions(
            command=opts.command,
            out=bundle,
            force=True,
            warmup=opts.warmup,
            active=opts.active,
            changes=changes,
            steady_within=opts.steady_within,
            echo=False,
        )
    )
    report = None
    try:
        report = _diagnose(bundle, opts)
    except InputError:
        pass  # no trace and no log: the record says the arm has no steps
    rec = _arm_record(
        arm,
        n,
        bundle,
        res.exit_code,
        res.status,
        report,
        res.manifest.get("interrupted_by"),
        bool(res.manifest.get("died_after_program_end")),
    )
    rec["cut_short"] = window_cut_short(bundle)
    if changes:
        rec["applied"] = _applied(bundle)
    if opts.reports is not None:
        opts.reports[(arm, n)] = report
    return rec, report


def window_cut_short(bundle: Path) -> dict | None:
    """The window waited past --warmup for the loader's prefetched batches (issue 37) and the job ended before
    it recorded --active steps (or before it started): what was seen, else None."""
    for p in sorted((bundle / "ranks").glob("rank*/settings.json")):
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        w = d.get("window") or {}
        st = w.get("steady") or {}
        waited = st.get("decided_by") == "waiting" or (st.get("waited_steps") or 0) > 0
        if waited and not w.get("complete"):
            return {
                "recorded_steps": w.get("recorded_steps") or 0,
                "requested_active": w.get("requested_active"),
                "steps_completed": d.get("steps_completed"),
                "prefetched_batches": st.get("prefetched_batches"),
            }
    return None


def _applied(bundle: Path) -> dict:
    applied, skipped = {}, {}
    for p in sorted((bundle / "ranks").glob("rank*/settings.json")):
        try:
            t = json.loads(p.read_text(encoding="utf-8")).get("trial") or {}
        except (OSError, ValueError):
            continue
        applied.update(t.get("applied") or {})
        skipped.update(t.get("skipped") or {})
    return {"applied": applied, "skipped": skipped}


def run_trial(opts: TrialOptions, say=print) -> dict:
    opts.out.mkdir(parents=True, exist_ok=True)
    arms: list[dict] = []
    base_report = None
    changes = opts.changes
    if opts.baseline is not None:
        base_report = _diagnose(opts.baseline, opts)
        arms.append(_arm_record("baseline", 0, opts.baseline, 0, "given", base_report))
    elif opts.reuse_arm is not None:
        base_report = opts.reuse_report
        arms.append(dict(opts.reuse_arm, arm="baseline", repeat=1, reused=True))
    base = opts.base_changes or None
    repeat, n = opts.repeat, 0
    while True:
        n += 1
        order = ("baseline", "try") if n % 2 else ("try", "baseline")
        for arm in order:
            if arm == "baseline" and (opts.baseline is not None or (opts.reuse_arm is not None and n == 1)):
                continue
            if arm == "try" and changes is None:  # `--try RULE`: the change comes from the baseline
                if base_report is None:
                    raise InputError(
                        f"--try {opts.rule}: the baseline recorded nothing to diagnose "
                        f"(see {opts.out / 'baseline-1'}); no change to take from it"
                    )
                changes = change_from_rule(opts.rule, base_report)
            rec, report = capture_arm(opts, arm, n, {**(base or {}), **changes} if arm == "try" else base)
            arms.append(rec)
            for line in arm_report(rec, _show(changes) if arm == "try" else None):  # the job's output: its bundle
                say(line)
            if arm == "baseline" and base_report is None:
                base_report = report
            if rec["failed"] and rec["exit_code"] != 0:
                return _finish(opts, arms, changes, base_report, failed_arm=arm)
        if repeat is None:
            repeat = stats.repeats_for(stats.cv(_times(arms, "baseline")))
        if n >= repeat:
            break
    return _finish(opts, arms, changes, base_report, failed_arm=None, repeat=repeat)


def _times(arms: list[dict], arm: str) -> list[float]:
    return [t for a in arms if a["arm"] == arm for t in a["step_times_ms"]]


def _runs(arms: list[dict], arm: str) -> list[list[float]]:
    """Each recorded run's step times of one arm, in recorded order (the stationarity check's input)."""
    return [list(a["step_times_ms"]) for a in arms if a["arm"] == arm and a["step_times_ms"]]


def _show(changes: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (changes or {}).items())


def _finish(opts: TrialOptions, arms: list[dict], changes, base_report, failed_arm, repeat=None) -> dict:
    base, treat = _times(arms, "baseline"), _times(arms, "try")
    out = {
        "schema": SCHEMA,
        "command": opts.command,
        "change": changes,
        "rule": opts.rule,
        "base_changes": opts.base_changes or None,
        "repeats_per_arm": repeat,
        "window": {"warmup": opts.warmup, "active": opts.active, "steady_within": opts.steady_within},
        "failed_arm": failed_arm,
        "arms": arms,
        "ci_method": f"bootstrap over each arm's recorded steps ({stats.BOOTSTRAP_SAMPLES} resamples), "
        "2.5/97.5 percentiles; measured_speedup: ratio of mean step times (the job's time per "
        "step); median_speedup: ratio of median step times (the typical step)",
    }
    out["steady"] = {arm: stats.stationarity(_runs(arms, arm)) for arm in ("baseline", "try")}
    out["not_steady"] = [arm for arm in ("baseline", "try") if out["steady"][arm]["steady"] is False]
    out["cut_short"] = sorted({a["arm"] for a in arms if a.get("cut_short")})
    if base and treat:
        ratio, lo, hi = stats.speedup(base, treat)
        mid, mlo, mhi = stats.speedup(base, treat, center="median")
        out.update(
            measured_speedup=round(ratio, 3),
            ci95=[round(lo, 3), round(hi, 3)],
            median_speedup=round(mid, 3),
            median_ci95=[round(mlo, 3), round(mhi, 3)],
            baseline_mean_step_ms=round(float(np.mean(base)), 3),
            try_mean_step_ms=round(float(np.mean(treat)), 3),
            baseline_median_step_ms=round(float(np.median(base)), 3),
            try_median_step_ms=round(float(np.median(treat)), 3),
        )
        if out["not_steady"]:  # a drift that cannot turn the measured change around does not void it
            bound = stats.drift_bound([out["steady"][a] for a in out["not_steady"]])
            if lo / bound > 1.0 or hi * bound < 1.0:
                out["drift_within_margin"], out["not_steady"] = out["not_steady"], []
    else:
        out.update(measured_speedup=None, ci95=None, median_speedup=None, median_ci95=None)
    out.update(
        prediction(changes or {}, base_report)
        if base_report is not None and changes
        else {"predicted_speedup": None, "predicted_by": None, "prediction_note": "no baseline diagnosis"}
    )
    verdict = lambda arm: next((a["label"] or a["verdict"] for a in arms if a["arm"] == arm), None)  # noqa: E731
    out["baseline_verdict"], out["try_verdict"] = verdict("baseline"), verdict("try")
    out["bottleneck_moved"] = (
        out["baseline_verdict"] != out["try_verdict"] if out["baseline_verdict"] and out["try_verdict"] else None
    )
    applied = next((a.get("applied") for a in arms if a["arm"] == "try" and a.get("applied")), None)
    out["applied"] = applied
    (opts.out / "trial.json").write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
    return out


ARM_NAMES = {"baseline": "the baseline", "try": "the run with the change"}


def _cut_short_line(t: dict) -> str:
    """An arm's job ended inside a window that had waited for the loader's buffer: too few steps to compare."""
    arm = t["cut_short"][0]
    cut = next(a["cut_short"] for a in t["arms"] if a["arm"] == arm and a.get("cut_short"))
    return (
        f"too few steps: {ARM_NAMES[arm]} ended after {cut['steps_completed']} steps, {cut['recorded_steps']} of "
        f"them recorded, the window having waited for the loader's {cut['prefetched_batches']} prefetched batches "
        f"to be used up; run the job longer (or `--steady-within 0` to record from --warmup on); over the window "
        f"as recorded {t['measured_speedup']:.2f}x, not a measured change"
    )


def _not_steady_line(t: dict) -> str:
    """An arm whose steps drifted inside its window: no faster/slower claim, and what to do."""
    parts = []
    for arm in t["not_steady"]:
        st = t["steady"][arm]
        lo, hi = st["ci95"]
        way = "slowed down" if st["first_over_second"] < 1 else "sped up"
        parts.append(
            f"{ARM_NAMES[arm]}'s steps {way} inside its window (first half / second half "
            f"{st['first_over_second']:.2f}x, 95 % {lo:.2f}–{hi:.2f})"
        )
    steps = max(len(a.get("step_times_ms") or []) for a in t.get("arms") or [{}])
    return (
        f"not steady: record more steps (`--active {max(2 * steps, 20)}`); "
        + "; ".join(parts)
        + f"; over the window as recorded {t['measured_speedup']:.2f}x, not a measured change"
    )


def summary_line(t: dict) -> str:
    if t.get("failed_arm"):
        arm = "the baseline" if t["failed_arm"] == "baseline" else "the run with the change"
        return f"trial stopped: {arm} failed (see its bundle); no speed-up measured"
    if t.get("measured_speedup") is None:
        return "no speed-up measured: an arm recorded no steps (see the bundles)"
    r, (lo, hi) = t["measured_speedup"], t["ci95"]
    if t.get("cut_short"):
        return _cut_short_line(t)
    if t.get("not_steady"):
        return _not_steady_line(t)
    if lo <= 1.0 <= hi:
        # the interval holds 1: neither faster nor slower can be claimed
        s = f"no measurable change: {r:.2f}x (95 % {lo:.2f}–{hi:.2f}, as baseline/try mean step time)"
    else:
        word = "faster" if r >= 1 else "slower"
        shown = r if r >= 1 else 1 / r
        s = f"measured {shown:.2f}x {word} (95 % {lo:.2f}–{hi:.2f}, as baseline/try mean step time)"
    mid = t.get("median_speedup")
    if mid and abs(np.log(mid / r)) > np.log(SHOW_MEDIAN_APART):
        if lo <= 1.0 <= hi:
            # the job's time per step did not move: a typical step that did is paid back by the other steps
            # (a loader serving bursts from its buffer, then waiting); its ratio alone would read as a change
            s += "; the typical (median) step moved, the job's time per step not measurably (other steps paid it back)"
        else:
            # the gain sits in some steps only (an epoch start, a periodic save): say what the typical step did
            s += f"; the typical (median) step {mid:.2f}x"
    if t.get("predicted_speedup"):
        s += f"; predicted up to {t['predicted_speedup']:.2f}x ({t['predicted_by']})"
    else:
        s += "; no prediction (" + (t.get("prediction_note") or "") + ")"
    if t.get("bottleneck_moved") is not None:
        s += (
            f"; bottleneck moved: {t['baseline_verdict']} -> {t['try_verdict']}"
            if t["bottleneck_moved"]
            else f"; still {t['baseline_verdict']}"
        )
    if (t.get("change") or {}).get("ddp.comm_hook") == "skip":
        s += (
            " — an ablation, not a fix: without any gradient communication the ranks train apart; "
            "the gain is what communication costs this job at most"
        )
    return s
