"""What `ddpdoctor tune` writes: OUT/tune.json (``ddpdoctor.tune/1``, docs/TUNE.md), the winning settings as
a patch in the framework's own terms, and the final terminal line."""

from __future__ import annotations

import json
from pathlib import Path

from ..rules_engine.frameworks import framework_table
from ..text import plural
from .tune import SCHEMA, State, cumulative, setting_text, threshold

# raw PyTorch: where each setting `--try` applies lives in the script (frameworks.toml holds the frameworks)
RAW_PYTORCH = {
    "dataloader.num_workers": "DataLoader(..., num_workers={value})",
    "dataloader.pin_memory": "DataLoader(..., pin_memory={value})",
    "dataloader.persistent_workers": "DataLoader(..., persistent_workers={value})",
    "dataloader.prefetch_factor": "DataLoader(..., prefetch_factor={value})",
    "ddp.bucket_cap_mb": "DistributedDataParallel(model, ..., bucket_cap_mb={value})",
    "ddp.gradient_as_bucket_view": "DistributedDataParallel(model, ..., gradient_as_bucket_view={value})",
    "ddp.static_graph": "DistributedDataParallel(model, ..., static_graph={value})",
    "ddp.find_unused_parameters": "DistributedDataParallel(model, ..., find_unused_parameters={value})",
    "ddp.comm_hook": "model.register_comm_hook(state=None, hook=default_hooks.{value})  # after DistributedDataParallel(...)",
    "torch.num_threads": "torch.set_num_threads({value})  # in every rank, before training",
}
FRAMEWORK_NAMES = {"pytorch": "PyTorch"}


def _literal(value, text: str) -> str:
    """The value as the script would write it (True, 4, 1.0), else the fix's own text."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return text if isinstance(value, str) else str(value)


def patch(settings: dict, values: dict, framework: str | None) -> dict:
    """The kept settings in the framework's own terms: one line per setting, environment variables apart."""
    fw = framework if isinstance(framework, str) and framework in framework_table() else "pytorch"
    table = framework_table().get(fw, {}).get("knobs", {})
    lines, env = [], {}
    for knob, value in settings.items():
        text = _literal(value, str(values.get(knob, value)))
        if knob.startswith("env."):
            env[knob[4:]] = str(value)
            continue
        if knob == "ddp.comm_hook" and not text.endswith("_compress_hook") and text in ("fp16", "bf16"):
            text += "_compress_hook"
        template = table.get(knob) or RAW_PYTORCH.get(knob)
        lines.append(template.replace("{value}", text) if template else f"{knob}={text}")
    lines += [f"export {k}={v}  # in the job's environment, before the launcher" for k, v in env.items()]
    name = framework_table().get(fw, {}).get("name") or FRAMEWORK_NAMES["pytorch"]
    return {"framework": fw, "framework_name": name, "settings": dict(settings), "environment": env, "lines": lines}


def _verdict(report) -> dict | None:
    if report is None:
        return None
    v = report.diagnosis.verdict
    return {
        "bottleneck": v.bottleneck,
        "label": v.label,
        "summary": v.summary,
        "rule": v.rule,
        "expected_speedup": v.expected_speedup,
        "failed": v.failed,
    }


def code_advice(report) -> str | None:
    """The first fix that is a change to the code, of the verdict's finding first (what to do when no
    setting helps)."""
    if report is None:
        return None
    lead = getattr(report.diagnosis.verdict, "rule", None)  # the verdict's finding first
    for f in sorted(report.diagnosis.findings, key=lambda f: f.rule != lead):
        for fx in f.fixes:
            if not getattr(fx, "knob", None):
                return f"[{f.rule}] {fx.title}"
    return None


def document(opts, st: State, base_report, best_report, seconds: float) -> dict:
    framework = (getattr(best_report or base_report, "facts", None) or {}).get("run.framework")
    faster_numerics = [
        t["shown"] for t in st.trials if not t["kept"] and t["why"].startswith("faster, changes numerics")
    ]
    return {
        "schema": SCHEMA,
        "command": opts.command,
        "window": {"warmup": opts.warmup, "active": opts.active},
        "limits": {
            "budget_minutes": round(opts.budget_s / 60, 2) if opts.budget_s else None,
            "max_trials": opts.max_trials,
            "allow_numerics": opts.allow_numerics,
            "repeat": opts.repeat,
        },
        "seconds": round(seconds, 1),
        "stopped": st.stopped,
        "exit_code": st.exit_code,
        "trials": st.trials,
        "not_tried": st.not_tried,
        "cumulative_speedup": cumulative(st.arms, st.best),
        "verdict": {"original": _verdict(base_report), "final": _verdict(best_report)},
        "settings": dict(st.best),
        "patch": patch(st.best, st.values, framework),
        "faster_but_changes_numerics": faster_numerics,
        "code_change_recommended": code_advice(best_report),
    }


def write(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)


def final_line(doc: dict) -> str:
    """ "measured X.XXx faster with: …", or a sentence that says why nothing helped and what to do instead."""
    cum = doc["cumulative_speedup"]
    if doc["settings"] and cum.get("measured") is not None:
        lines = "; ".join(doc["patch"]["lines"])
        ci = cum.get("ci95")
        shown = ", ".join(setting_text(k, v) for k, v in doc["settings"].items())
        return f"measured {cum['measured']:.2f}x faster with: {shown} ({lines})" + (
            f"; 95 % {ci[0]:.2f}–{ci[1]:.2f}, the final settings against the original job" if ci else ""
        )
    if doc["settings"]:
        return f"kept {', '.join(doc['settings'])}, but {cum.get('note')}"
    if doc.get("exit_code") == 130:
        return "interrupted before any change was kept; what was measured is in tune.json"
    tried = len(doc["trials"])
    head = (
        f"no setting made this job measurably faster ({plural(tried, 'setting')} tried)"
        if tried
        else f"no setting to try: none of the diagnosis's fixes is a setting `--try` can apply with a predicted "
        f"gain above {threshold():.2f}x"
    )
    advice = doc.get("code_change_recommended")
    return head + (f"; it recommends a code change instead: {advice}" if advice else "")
