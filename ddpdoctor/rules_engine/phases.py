"""Run-level facts of the step's phases and of the optimizer's implementation, from each rank's phase extras
(metrics/phases.py): ``step.phases``, ``step.top_phase``, ``optimizer.*``. Medians over the ranks that show
the phase."""

from __future__ import annotations

from statistics import median

from ..metrics.phases import PHASES

PHASE_WORDS = {
    "data": "waiting for the DataLoader",
    "optimizer_step": "the optimizer step",
    "zero_grad": "zero_grad",
    "backward": "the backward (DDP's gradient all-reduce included)",
    "forward": "the forward",
    "to_device": "moving the batch to the device",
    "loop": "the loop's own code",
}
MIN_LISTED_SHARE = 0.01  # phases under 1 % of the step are left out of step.phases


def phase_facts(summaries, facts: dict) -> None:
    measured = {p: _median_share(summaries, f"phase_{p}_us") for p in PHASES}
    shares: dict[str, float] = {p: s for p, s in measured.items() if s is not None}
    if shares:
        listed = sorted(((s, p) for p, s in shares.items() if s >= MIN_LISTED_SHARE), reverse=True)
        facts["step.phases"] = ", ".join(f"{PHASE_WORDS[p]} {round(100 * s)} %" for s, p in listed)
        facts["step.top_phase"] = PHASE_WORDS[max(shares, key=lambda p: shares[p])]
    _optimizer_facts(summaries, facts, shares.get("optimizer_step"))


def _median_share(summaries, key: str) -> float | None:
    vals = []
    for s in summaries:
        v, step = s.extras.get(key), _mean_step(s)
        if v is not None and step:
            vals.append(v / step)
    return median(vals) if vals else None


def _mean_step(s) -> float | None:
    steps = [v for v in s.values.get("step_time", []) if v is not None]
    return sum(steps) / len(steps) if steps and sum(steps) > 0 else None


def _optimizer_facts(summaries, facts: dict, step_share: float | None) -> None:
    ops = [s.extras["optimizer_ops_per_step"] for s in summaries if s.extras.get("optimizer_ops_per_step")]
    if not ops:
        return
    if any(s.extras.get("optimizer_fused_ops_per_step") for s in summaries):
        facts["optimizer.implementation"] = "fused"
    elif any(s.extras.get("optimizer_foreach_ops_per_step") for s in summaries):
        facts["optimizer.implementation"] = "foreach"
    else:
        facts["optimizer.implementation"] = "for-loop"
    facts["optimizer.ops_per_step"] = round(median(ops), 1)
    loop = [s.extras["optimizer_loop_params"] for s in summaries if s.extras.get("optimizer_loop_params")]
    if loop and facts["optimizer.implementation"] == "for-loop":
        facts["optimizer.loop_params"] = int(median(loop))
    names = [s.optimizer_class for s in summaries if getattr(s, "optimizer_class", None)]
    if names:
        facts["optimizer.name"] = max(set(names), key=names.count)
    if step_share is not None:
        facts["optimizer.step_share"] = round(step_share, 4)
        step_us = [s.extras["phase_optimizer_step_us"] for s in summaries if s.extras.get("phase_optimizer_step_us")]
        if step_us:
            facts["optimizer.step_ms"] = round(median(step_us) / 1000.0, 1)
