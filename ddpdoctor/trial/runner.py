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

from ..capture.launcher import RunOptions, run_capture
from ..errors import InputError
from . import stats

SCHEMA = "ddpdoctor.trial/1"
# the summary line adds the median step's speed-up when it is this far (either way) from the mean's
SHOW_MEDIAN_APART = 1.15


@dataclass
class TrialOptions:
    command: list[str]
    out: Path
    changes: dict | None              # None with rule set: taken from the baseline's diagnosis
    rule: str | None = None           # `--try DL001`
    repeat: int | None = None         # per arm; None: chosen from the noise of the first pair
    baseline: Path | None = None      # an existing bundle as the baseline arm
    warmup: int = 5
    active: int = 5
    force: bool = False


def _diagnose(bundle: Path):
    from ..diagnosis import run_analyze

    return run_analyze([str(bundle)])


def _arm_record(arm: str, n: int, bundle: Path, exit_code: int, status: str, report) -> dict:
    times = stats.job_step_times_us(report.analysis.summaries) if report and report.analysis else []
    v = report.diagnosis.verdict if report else None
    return {"arm": arm, "repeat": n, "bundle": str(bundle), "exit_code": exit_code, "status": status,
            "steps": len(times), "step_times_ms": [round(t / 1000, 3) for t in times],
            "verdict": getattr(v, "bottleneck", None), "label": getattr(v, "label", None),
            "failed": bool(getattr(v, "failed", False)) or exit_code != 0}


def change_from_rule(rule: str, report) -> dict:
    """The first fix of RULE in the baseline's diagnosis, as a change `run` can apply."""
    from ..capture.agent_overrides import OverrideError, parse_change

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
        raise InputError(f"--try {rule}: its first fix ({fx.title}) is a change to the code or the host, "
                         "not a setting run can apply")
    raise InputError(f"--try {rule}: the finding has no fix")


# the cost a setting acts on, when no fix of the diagnosis names the setting itself (e.g. on a 2-CPU host
# DL001's first fix is "make each batch cheaper", yet more workers still overlap waits on storage)
KNOB_CATEGORY = {"dataloader.num_workers": "dataloader", "dataloader.prefetch_factor": "dataloader",
                 "dataloader.persistent_workers": "dataloader", "ddp.bucket_cap_mb": "communication",
                 "ddp.comm_hook": "communication",
                 "ddp.gradient_as_bucket_view": "communication", "ddp.static_graph": "communication",
                 "env.NCCL_": "communication"}


def prediction(changes: dict, report) -> dict:
    """The upper bound of the baseline finding whose fixes change one of the tried settings (else of the
    finding of the category that setting acts on)."""
    keys = set(changes)
    cats = {c for k in keys for prefix, c in KNOB_CATEGORY.items() if k.startswith(prefix)}
    best = None
    for named in (True, False):
        for f in report.diagnosis.findings:
            hit = any(fx.knob in keys for fx in f.fixes) if named else f.category in cats
            if f.expected_speedup and hit and (best is None or f.expected_speedup > best.expected_speedup):
                best = f
        if best is not None:
            break
    if best is None:
        return {"predicted_speedup": None, "predicted_by": None,
                "prediction_note": "no finding of the baseline's diagnosis proposes this change"}
    refined = bucket_prediction(changes, report)
    if refined is not None:
        return refined
    return {"predicted_speedup": round(best.expected_speedup, 3), "predicted_by": best.rule,
            "prediction_note": f"{best.rule} ({best.title}): the upper bound if its cost were removed"}


def bucket_prediction(changes: dict, report) -> dict | None:
    """``ddp.bucket_cap_mb`` from the message counts and sizes CM001 measured, instead of the exposed-time
    bound (which a 192-collective job beat: 2.97x measured against "up to 1.91x").

    - Fewer, larger collectives: each collective pays a fixed latency, and on a CPU backend with one core
      per rank every collective's thread also takes CPU from the training thread. What the change can save
      is the transfer time of the collectives that go away, ``transfer × (1 − n_new / n_now)``, overlapped
      or not (the ablation in docs/DESIGN.md: with one CPU per rank the measured cost of communication
      follows the whole transfer share, not its exposed part nor the time waiting for peers, which
      fewer collectives do not remove); on a GPU, or with cores to spare, only the exposed part of it.
    - More, smaller collectives only help by overlapping communication with backward; a CPU backend with
      at most one core per rank has no core to overlap on: no gain expected."""
    import math

    value = changes.get("ddp.bucket_cap_mb")
    cm = next((f for f in report.diagnosis.findings if f.rule == "CM001"), None)
    if value is None or len(changes) != 1 or cm is None:
        return None
    ev, facts = cm.evidence or {}, report.facts
    grad_mb, n_now = ev.get("grad_mb"), ev.get("colls") or ev.get("buckets")
    comm = ev.get("all_transfer_share")
    if not isinstance(comm, (int, float)) or comm <= 0:
        comm = ev.get("comm_share")          # a document from before the transfer share was recorded
    if not all(isinstance(x, (int, float)) and x > 0 for x in (grad_mb, n_now, comm)) or float(value) <= 0:
        return None
    n_new = max(1, math.ceil(grad_mb / float(value)))
    cpus = facts.get("host.cpus_per_local_rank")
    one_core = facts.get("run.device") == "cpu" and isinstance(cpus, (int, float)) and cpus < 2
    if n_new >= n_now:
        if not one_core:
            return None
        return {"predicted_speedup": 1.0, "predicted_by": "CM001",
                "prediction_note": (f"CM001: {n_now:.0f} → {n_new} collectives per step; smaller buckets pay off by "
                                    "overlapping communication with backward, and a CPU backend with "
                                    f"{cpus:g} CPU per rank has no core to overlap on")}
    part = comm if one_core else min(comm, cm.cost or comm)
    saved = part * (1 - n_new / n_now)
    return {"predicted_speedup": round(1 / (1 - min(saved, 0.95)), 3), "predicted_by": "CM001",
            "prediction_note": (f"CM001: {n_now:.0f} → {n_new} collectives per step ({grad_mb:.1f} MB of gradients in "
                                f"{float(value):g} MB buckets); up to {saved:.0%} of the step saved, the "
                                + ("transfer time of the collectives that go away (one core per rank: their "
                                   "threads take the training thread's CPU)" if one_core else
                                   "exposed communication of the collectives that go away"))}


def _capture(opts: TrialOptions, arm: str, n: int, changes: dict | None) -> tuple[dict, object]:
    bundle = opts.out / f"{arm}-{n}"
    res = run_capture(RunOptions(command=opts.command, out=bundle, force=True, warmup=opts.warmup,
                                 active=opts.active, changes=changes))
    report = None
    try:
        report = _diagnose(bundle)
    except InputError:
        pass                                   # no trace and no log: the record says the arm has no steps
    rec = _arm_record(arm, n, bundle, res.exit_code, res.status, report)
    if changes:
        rec["applied"] = _applied(bundle)
    return rec, report


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
        base_report = _diagnose(opts.baseline)
        arms.append(_arm_record("baseline", 0, opts.baseline, 0, "given", base_report))
    repeat, n = opts.repeat, 0
    while True:
        n += 1
        order = ("baseline", "try") if n % 2 else ("try", "baseline")
        for arm in order:
            if arm == "baseline" and opts.baseline is not None:
                continue
            if arm == "try" and changes is None:          # `--try RULE`: the change comes from the baseline
                if base_report is None:
                    raise InputError(f"--try {opts.rule}: the baseline recorded nothing to diagnose "
                                     f"(see {opts.out / 'baseline-1'}); no change to take from it")
                changes = change_from_rule(opts.rule, base_report)
            say(f"ddpdoctor: trial {arm} #{n}" + (f" ({_show(changes)})" if arm == "try" else ""))
            rec, report = _capture(opts, arm, n, changes if arm == "try" else None)
            arms.append(rec)
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


def _show(changes: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (changes or {}).items())


def _finish(opts: TrialOptions, arms: list[dict], changes, base_report, failed_arm, repeat=None) -> dict:
    base, treat = _times(arms, "baseline"), _times(arms, "try")
    out = {"schema": SCHEMA, "command": opts.command, "change": changes, "rule": opts.rule,
           "repeats_per_arm": repeat, "window": {"warmup": opts.warmup, "active": opts.active},
           "failed_arm": failed_arm, "arms": arms,
           "ci_method": f"bootstrap over each arm's recorded steps ({stats.BOOTSTRAP_SAMPLES} resamples), "
                        "2.5/97.5 percentiles; measured_speedup: ratio of mean step times (the job's time per "
                        "step); median_speedup: ratio of median step times (the typical step)"}
    if base and treat:
        ratio, lo, hi = stats.speedup(base, treat)
        mid, mlo, mhi = stats.speedup(base, treat, center="median")
        out.update(measured_speedup=round(ratio, 3), ci95=[round(lo, 3), round(hi, 3)],
                   median_speedup=round(mid, 3), median_ci95=[round(mlo, 3), round(mhi, 3)],
                   baseline_mean_step_ms=round(float(np.mean(base)), 3), try_mean_step_ms=round(float(np.mean(treat)), 3),
                   baseline_median_step_ms=round(float(np.median(base)), 3),
                   try_median_step_ms=round(float(np.median(treat)), 3))
    else:
        out.update(measured_speedup=None, ci95=None, median_speedup=None, median_ci95=None)
    out.update(prediction(changes or {}, base_report) if base_report is not None and changes else
               {"predicted_speedup": None, "predicted_by": None, "prediction_note": "no baseline diagnosis"})
    verdict = lambda arm: next((a["label"] or a["verdict"] for a in arms if a["arm"] == arm), None)  # noqa: E731
    out["baseline_verdict"], out["try_verdict"] = verdict("baseline"), verdict("try")
    out["bottleneck_moved"] = (out["baseline_verdict"] != out["try_verdict"]
                               if out["baseline_verdict"] and out["try_verdict"] else None)
    applied = next((a.get("applied") for a in arms if a["arm"] == "try" and a.get("applied")), None)
    out["applied"] = applied
    (opts.out / "trial.json").write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
    return out


def summary_line(t: dict) -> str:
    if t.get("failed_arm"):
        arm = "the baseline" if t["failed_arm"] == "baseline" else "the run with the change"
        return f"trial stopped: {arm} failed (see its bundle); no speed-up measured"
    if t.get("measured_speedup") is None:
        return "no speed-up measured: an arm recorded no steps (see the bundles)"
    r, (lo, hi) = t["measured_speedup"], t["ci95"]
    word = "faster" if r >= 1 else "slower"
    shown = r if r >= 1 else 1 / r
    s = f"measured {shown:.2f}x {word} (95 % {lo:.2f}–{hi:.2f}, as baseline/try mean step time)"
    mid = t.get("median_speedup")
    if mid and abs(np.log(mid / r)) > np.log(SHOW_MEDIAN_APART):
        # the gain sits in some steps only (an epoch start, a periodic save): say what the typical step did
        s += f"; the typical (median) step {mid:.2f}x"
    if t.get("predicted_speedup"):
        s += f"; predicted up to {t['predicted_speedup']:.2f}x ({t['predicted_by']})"
    else:
        s += "; no prediction (" + (t.get("prediction_note") or "") + ")"
    if t.get("bottleneck_moved") is not None:
        s += (f"; bottleneck moved: {t['baseline_verdict']} -> {t['try_verdict']}" if t["bottleneck_moved"]
              else f"; still {t['baseline_verdict']}")
    if (t.get("change") or {}).get("ddp.comm_hook") == "skip":
        s += (" — an ablation, not a fix: without any gradient communication the ranks train apart; "
              "the gain is what communication costs this job at most")
    return s
