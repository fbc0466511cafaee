"""What a change `run --try` can apply is predicted to gain, from a diagnosis document alone.

Read by the trial (the prediction it prints beside the measurement) and by the card (which suggests
``--try`` only when the prediction is worth measuring): both read the same document
(``ddpdoctor.diagnosis/1``), so the number the card promises is the number the trial checks.

- By default the prediction is the upper bound of the baseline finding whose fixes change the tried
  setting (else of the finding of the category the setting acts on): 1 / (1 − its cost).
- A setting whose fix declares a model (``predict = "collective_count"`` for bucket sizes,
  ``"halved_bytes"`` for a 16-bit hook, on the rule's ``[[fix]]``; read by trial/fix_traits.py) is
  predicted from the messages that finding measured instead (:func:`bucket_prediction`,
  :func:`compression_prediction`). No rule id is written here: the rule files say which finding
  carries what a model reads.
"""

from __future__ import annotations

import math

from ..resources import metric_defaults
from .fix_traits import traits

# the cost a setting acts on, when no fix of the diagnosis names the setting itself (e.g. on a 2-CPU host
# the loader finding's first fix is "make each batch cheaper", yet more workers still overlap waits on storage)
KNOB_CATEGORY = {
    "dataloader.num_workers": "dataloader",
    "dataloader.prefetch_factor": "dataloader",
    "dataloader.persistent_workers": "dataloader",
    "ddp.bucket_cap_mb": "communication",
    "ddp.comm_hook": "communication",
    "ddp.gradient_as_bucket_view": "communication",
    "ddp.static_graph": "communication",
    "env.NCCL_": "communication",
}

NONE = {"predicted_speedup": None, "predicted_by": None}


def predict(changes: dict, doc: dict) -> dict:
    """{predicted_speedup, predicted_by, prediction_note} for these settings on the run of ``doc``."""
    keys = set(changes)
    cats = {c for k in keys for prefix, c in KNOB_CATEGORY.items() if k.startswith(prefix)}
    findings = doc.get("findings") or []
    best = None
    for named in (True, False):
        for f in findings:
            hit = any(fx.get("knob") in keys for fx in f.get("fixes") or []) if named else f.get("category") in cats
            up = f.get("expected_speedup")
            if up and hit and (best is None or up > best["expected_speedup"]):
                best = f
        if best is not None:
            break
    if best is None:
        return dict(NONE, prediction_note="no finding of the baseline's diagnosis proposes this change")
    for model in (bucket_prediction, compression_prediction):
        refined = model(changes, doc)
        if refined is not None:
            return refined
    return {
        "predicted_speedup": round(best["expected_speedup"], 3),
        "predicted_by": best["rule"],
        "prediction_note": f"{best['rule']} ({best.get('title')}): the upper bound if its cost were removed",
    }


def _modelled(changes: dict, doc: dict, knob: str, model: str) -> dict | None:
    """The finding whose rule declares MODEL for KNOB (its evidence is what the model reads), when the
    change is that one knob."""
    if set(changes) != {knob}:
        return None
    return next((f for f in doc.get("findings") or [] if traits(f.get("rule"), knob).predict == model), None)


def _one_core(doc: dict) -> tuple[bool, object]:
    """A CPU backend with under 2 CPUs per rank: gloo's threads run on the training thread's CPU, so
    communication overlaps nothing and costs the rank its whole transfer time."""
    facts = doc.get("facts") or {}
    cpus = facts.get("host.cpus_per_local_rank")
    return (facts.get("run.device") == "cpu" and isinstance(cpus, (int, float)) and cpus < 2), cpus


def _transfer(cm: dict) -> float | None:
    ev = cm.get("evidence") or {}
    share = ev.get("all_transfer_share")
    if not isinstance(share, (int, float)) or share <= 0:
        share = ev.get("comm_share")  # a document from before the transfer share was recorded
    return float(share) if isinstance(share, (int, float)) and share > 0 else None


def bucket_prediction(changes: dict, doc: dict) -> dict | None:
    """``ddp.bucket_cap_mb`` from the message counts and sizes the communication finding measured, instead of the exposed-time
    bound (which a 192-collective job beat: 2.97x measured against "up to 1.91x").

    - Fewer, larger collectives: each collective pays a fixed latency, and on a CPU backend with one core
      per rank every collective's thread also takes CPU from the training thread. What the change can save
      is the transfer time of the collectives that go away, ``transfer × (1 − n_new / n_now)``, overlapped
      or not (the ablation in docs/DESIGN.md: with one CPU per rank the measured cost of communication
      follows the whole transfer share, not its exposed part nor the time waiting for peers, which
      fewer collectives do not remove); on a GPU, or with cores to spare, only the exposed part of it.
    - More, smaller collectives only help by overlapping communication with backward; a CPU backend with
      at most one core per rank has no core to overlap on: no gain expected (comm_heavy, 1 → 6 buckets:
      1.01x measured, 95 % 0.94–1.04)."""
    cm = _modelled(changes, doc, "ddp.bucket_cap_mb", "collective_count")
    if cm is None:
        return None
    try:
        value = float(changes["ddp.bucket_cap_mb"])
    except (TypeError, ValueError):
        return None
    ev = cm.get("evidence") or {}
    grad_mb, n_now, comm = ev.get("grad_mb"), ev.get("colls") or ev.get("buckets"), _transfer(cm)
    if not all(isinstance(x, (int, float)) and x > 0 for x in (grad_mb, n_now, comm)) or value <= 0:
        return None
    n_new = max(1, math.ceil(grad_mb / value))
    one_core, cpus = _one_core(doc)
    if n_new >= n_now:
        if not one_core:
            return None
        return {
            "predicted_speedup": 1.0,
            "predicted_by": cm["rule"],
            "prediction_note": (
                f"{cm['rule']}: {n_now:.0f} → {n_new} collectives per step; smaller buckets pay off by "
                "overlapping communication with backward, and a CPU backend with "
                f"{cpus:g} CPU per rank has no core to overlap on"
            ),
        }
    part = comm if one_core else min(comm, cm.get("cost") or comm)
    saved = part * (1 - n_new / n_now)
    return {
        "predicted_speedup": round(1 / (1 - min(saved, 0.95)), 3),
        "predicted_by": cm["rule"],
        "prediction_note": (
            f"{cm['rule']}: {n_now:.0f} → {n_new} collectives per step ({grad_mb:.1f} MB of gradients in "
            f"{value:g} MB buckets); up to {saved:.0%} of the step saved, the "
            + (
                "transfer time of the collectives that go away (one core per rank: their "
                "threads take the training thread's CPU)"
                if one_core
                else "exposed communication of the collectives that go away"
            )
        ),
    }


def compression_prediction(changes: dict, doc: dict) -> dict | None:
    """A 16-bit hook (``ddp.comm_hook=fp16|bf16``) halves the bytes of every gradient all-reduce: at most
    half the exposed transfer time goes away. Not on a CPU backend: there the casts and gloo's 16-bit
    sums cost more than the bytes save (comm_heavy, one CPU per rank: predicted up to 1.48x by the cost's
    bound, measured 0.72x, 95 % 0.63–0.83): no gain predicted."""
    cm = _modelled(changes, doc, "ddp.comm_hook", "halved_bytes")
    if cm is None or str(changes["ddp.comm_hook"]).lower().removesuffix("_compress_hook") not in ("fp16", "bf16"):
        return None
    comm = _transfer(cm)
    if comm is None:
        return None
    if (doc.get("facts") or {}).get("run.device") == "cpu":
        return {
            "predicted_speedup": 1.0,
            "predicted_by": cm["rule"],
            "prediction_note": (
                f"{cm['rule']}: on a CPU backend the 16-bit casts and gloo's 16-bit sums cost more than "
                "the halved bytes save (comm_heavy, one CPU per rank: 1.38x slower measured)"
            ),
        }
    one_core, _cpus = _one_core(doc)
    part = comm if one_core else min(comm, cm.get("cost") or comm)
    saved = part / 2
    return {
        "predicted_speedup": round(1 / (1 - min(saved, 0.95)), 3),
        "predicted_by": cm["rule"],
        "prediction_note": (
            f"{cm['rule']}: 16-bit gradients halve the bytes on the wire; up to {saved:.0%} of the step "
            "saved, half the " + ("transfer time (one core per rank)" if one_core else "exposed communication")
        ),
    }


def fix_prediction(doc: dict, fix: dict | None) -> dict | None:
    """The prediction for a fix `run --try` can apply (one with a knob and a value), else None."""
    if not fix or not fix.get("knob") or fix.get("value") is None:
        return None
    return predict({fix["knob"]: fix["value"]}, doc)


def no_gain(fix: dict) -> bool:
    """A fix the analysis stored as not worth a trial (``worth_a_trial`` false: its prediction is at or under
    [trial] min_predicted_speedup, so a trial of a few steps per arm could not tell it from noise): it never
    leads.  Reads the document only (:func:`annotate` decided), so a renderer calling it reads no threshold."""
    return fix.get("worth_a_trial") is False


def mark_worth(doc: dict, min_speedup: float | None = None, missing_only: bool = False) -> dict:
    """Store ``worth_a_trial`` on every fix with a ``predicted_speedup``: above ``min_speedup`` (default: [trial]
    min_predicted_speedup as shipped).  ``missing_only``: only where the document lacks it (a report.json
    written before the field existed, read back by report/files.load_diagnosis)."""
    line = metric_defaults()["trial"]["min_predicted_speedup"] if min_speedup is None else min_speedup
    for f in doc.get("findings") or []:
        for fx in f.get("fixes") or []:
            p = fx.get("predicted_speedup")
            if isinstance(p, (int, float)) and not (missing_only and "worth_a_trial" in fx):
                fx["worth_a_trial"] = p > line
    return doc


def annotate(doc: dict, thresholds: dict | None = None) -> dict:
    """Store in the diagnosis document the prediction of every fix `run --try` can apply (``predicted_speedup``,
    ``prediction_note``) and whether it is worth a trial (``worth_a_trial``: above [trial] min_predicted_speedup
    of ``thresholds``, the analysis's own; default the shipped file), and move a fix predicted at no gain after
    the other fixes of its finding, so that every output (the card, -v, the reports, report.json) reads one
    prediction and one order and none computes its own or reads a threshold.
    Called once, where the document is built (report/json_report.to_dict)."""
    for f in doc.get("findings") or []:
        for fx in f.get("fixes") or []:
            p = fix_prediction(doc, fx)
            if p is not None and p.get("predicted_speedup") is not None:
                fx["predicted_speedup"] = p["predicted_speedup"]
                fx["prediction_note"] = p.get("prediction_note")
    mark_worth(doc, None if thresholds is None else thresholds["trial"]["min_predicted_speedup"])
    for f in doc.get("findings") or []:
        f["fixes"] = sorted(f.get("fixes") or [], key=no_gain)  # stable: the rule's own order otherwise
    return doc
