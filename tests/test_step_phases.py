"""Step phases and the optimizer's implementation from the trace (metrics/phases.py, rules_engine/phases.py):
data wait, optimizer step, zero_grad, backward, forward, moving the batch, the loop's own code; a single-tensor
for-loop told from foreach and fused by the operators inside Optimizer.step (issue 39)."""

import pytest
from tracebuilder import TraceBuilder

from ddpdoctor.metrics.breakdown import summarize
from ddpdoctor.rules_engine.phases import phase_facts
from ddpdoctor.trace.decode import load_rank_trace

ADAM_PER_TENSOR = ("aten::lerp_", "aten::mul_", "aten::addcmul_", "aten::sqrt", "aten::div", "aten::addcdiv_")


def _cpu_steps(tmp_path, optimizer_ops, name="rank0.json", steps=2, tensors=50):
    """Steps of 1000 µs: data 0-100, to-device 100-120, forward 120-300, zero_grad 300-320, backward 320-600
    (an all-reduce at 560-600 inside it), loop code 600-650, optimizer step 650-950, loop code 950-1000."""
    b = TraceBuilder(backend="gloo", world_size=2)
    for i in range(steps):
        t = 1000.0 * i
        b.step(i + 1, t, t + 1000)
        b.dataloader(t, t + 100)
        b.op("aten::to", t + 100, t + 120)
        b.annotation("DistributedDataParallel.forward", t + 120, t + 300)
        b.op("aten::linear", t + 130, t + 290)
        b.annotation("Optimizer.zero_grad#Adam.zero_grad", t + 300, t + 320)
        b.op("autograd::engine::evaluate_function: AddmmBackward0", t + 320, t + 600)
        b.annotation("gloo:all_reduce", t + 560, t + 600)
        b.annotation("Optimizer.step#Adam.step", t + 650, t + 950)
        optimizer_ops(b, t + 650, tensors)
    s = summarize(load_rank_trace(b.write(tmp_path / name)), 0)
    return s


def _for_loop(b, t0, tensors):
    width = 290.0 / (tensors * len(ADAM_PER_TENSOR))
    k = 0
    for _ in range(tensors):
        for name in ADAM_PER_TENSOR:
            b.op(name, t0 + 5 + k * width, t0 + 5 + (k + 0.8) * width)
            k += 1


def _foreach(b, t0, tensors):
    for j, name in enumerate(("aten::_foreach_lerp_", "aten::_foreach_mul_", "aten::_foreach_addcdiv_")):
        b.op(name, t0 + 10 + 90 * j, t0 + 90 + 90 * j)


def _fused(b, t0, tensors):
    b.op("aten::_fused_adam_", t0 + 10, t0 + 280)


def test_phases_of_a_cpu_step(tmp_path):
    s = _cpu_steps(tmp_path, _for_loop)
    x = s.extras
    assert x["phase_data_us"] == pytest.approx(100)
    assert x["phase_to_device_us"] == pytest.approx(20)
    assert x["phase_forward_us"] == pytest.approx(180)
    assert x["phase_zero_grad_us"] == pytest.approx(20)
    assert x["phase_backward_us"] == pytest.approx(280)
    assert x["phase_optimizer_step_us"] == pytest.approx(300)
    assert x["phase_loop_us"] == pytest.approx(100)  # 600-650 and 950-1000
    assert s.optimizer_class == "Adam"


def test_a_for_loop_optimizer_and_its_parameter_tensors(tmp_path):
    s = _cpu_steps(tmp_path, _for_loop, tensors=50)
    assert s.extras["optimizer_ops_per_step"] == pytest.approx(300)
    assert s.extras["optimizer_loop_params"] == 50
    assert s.extras["optimizer_foreach_ops_per_step"] == 0 and s.extras["optimizer_fused_ops_per_step"] == 0
    facts = {}
    phase_facts([s], facts)
    assert facts["optimizer.implementation"] == "for-loop" and facts["optimizer.loop_params"] == 50
    assert facts["optimizer.name"] == "Adam" and facts["optimizer.step_share"] == pytest.approx(0.3)
    assert facts["step.top_phase"] == "the optimizer step"
    assert facts["step.phases"].startswith("the optimizer step 30 %, the backward (DDP's gradient all-reduce")
    assert (
        "waiting for the DataLoader 10 %" in facts["step.phases"] and "the loop's own code 10 %" in facts["step.phases"]
    )


@pytest.mark.parametrize("ops,impl", [(_foreach, "foreach"), (_fused, "fused")])
def test_foreach_and_fused_are_not_the_loop(tmp_path, ops, impl):
    s = _cpu_steps(tmp_path, ops)
    assert s.extras["optimizer_loop_params"] is None
    facts = {}
    phase_facts([s], facts)
    assert facts["optimizer.implementation"] == impl and "optimizer.loop_params" not in facts


def test_a_trace_without_an_optimizer_step_gives_no_optimizer_facts(tmp_path):
    b = TraceBuilder(backend="gloo", world_size=2)
    b.step(1, 0, 1000)
    b.op("aten::mm", 10, 900)
    s = summarize(load_rank_trace(b.write(tmp_path / "rank0.json")), 0)
    facts = {}
    phase_facts([s], facts)
    assert not any(k.startswith("optimizer.") for k in facts)
    assert facts["step.top_phase"] == "the loop's own code"
