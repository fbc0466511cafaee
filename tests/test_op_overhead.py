"""metrics/op_overhead.py: the share of a CPU step in tiny operators and the Python between them."""

import numpy as np

from ddpdoctor.metrics import intervals as iv
from ddpdoctor.metrics.op_overhead import TINY_US, op_overhead_extras, top_level
from ddpdoctor.trace.model import Spans


def spans(pairs):
    return Spans.build([a for a, _ in pairs], [b for _, b in pairs], ["aten::op"] * len(pairs))


def test_top_level_drops_nested_operators():
    s, e = top_level(np.array([0.0, 1.0, 2.0, 10.0, 11.0]), np.array([9.0, 2.0, 3.0, 12.0, 11.5]))
    assert s.tolist() == [0.0, 10.0] and e.tolist() == [9.0, 12.0]
    s, e = top_level(np.array([]), np.array([]))
    assert s.size == 0


def test_a_loop_of_tiny_operators_is_mostly_overhead():
    # one step of 1000 µs: 100 operators of 5 µs, 5 µs of Python between each
    ops = [(i * 10.0, i * 10.0 + 5.0) for i in range(100)]
    out = op_overhead_extras(spans(ops), iv.EMPTY, np.array([0.0]), np.array([1000.0]))
    assert out["cpu_ops_per_step"] == 100 and out["cpu_op_median_us"] == 5.0
    assert abs(out["tiny_op_share"] - (100 * 5 + 99 * 5) / 1000) < 1e-9


def test_large_operators_and_long_gaps_are_not_overhead():
    # two steps, each one 800 µs convolution and two 10 µs operators; a 150 µs gap of Python between them
    ops = []
    for base in (0.0, 1000.0):
        ops += [(base, base + 800.0), (base + 810.0, base + 820.0), (base + 970.0, base + 980.0)]
    out = op_overhead_extras(spans(ops), iv.EMPTY, np.array([0.0, 1000.0]), np.array([1000.0, 2000.0]))
    assert out["cpu_ops_per_step"] == 3
    # per step: the two 10 µs operators and the 10 µs gap before the first (the 150 µs gap is not tiny)
    assert abs(out["tiny_op_share"] - 30 / 1000) < 1e-9
    assert TINY_US < 150


def test_operators_inside_the_dataloader_are_the_loaders():
    ops = [(i * 10.0, i * 10.0 + 5.0) for i in range(100)]
    loader = iv.union(np.array([0.0]), np.array([600.0]))
    out = op_overhead_extras(spans(ops), loader, np.array([0.0]), np.array([1000.0]))
    assert out["cpu_ops_per_step"] == 40
    assert abs(out["tiny_op_share"] - (40 * 5 + 39 * 5) / 1000) < 1e-9


def test_nothing_to_measure():
    assert op_overhead_extras(spans([]), iv.EMPTY, np.array([0.0]), np.array([1.0])) == {}
    assert op_overhead_extras(spans([(0.0, 1.0)]), iv.EMPTY, np.array([]), np.array([])) == {}
    # an operator outside every step
    assert op_overhead_extras(spans([(5.0, 6.0)]), iv.EMPTY, np.array([10.0]), np.array([20.0])) == {}


def test_parametrization_maps_counted_outermost_with_their_backward():
    from ddpdoctor.metrics.op_overhead import param_map_extras

    # two steps of 1000 µs; per step: 3 forward matrix_exp calls of 50 µs (one with a nested matrix_exp), one
    # backward node of 100 µs with a matrix_exp inside it, and an unrelated matmul
    names, start, end = [], [], []
    for base in (0.0, 1000.0):
        for k in range(3):
            names.append("aten::linalg_matrix_exp")
            start.append(base + k * 100.0)
            end.append(base + k * 100.0 + 50.0)
        names.append("aten::matrix_exp")  # nested in the first call
        start.append(base + 10.0)
        end.append(base + 20.0)
        names.append("LinalgMatrixExpBackward0")
        start.append(base + 500.0)
        end.append(base + 600.0)
        names.append("aten::linalg_matrix_exp")  # inside the backward node: not a forward call
        start.append(base + 510.0)
        end.append(base + 590.0)
        names.append("aten::mm")
        start.append(base + 700.0)
        end.append(base + 900.0)
    out = param_map_extras(Spans.build(start, end, names), np.array([0.0, 1000.0]), np.array([1000.0, 2000.0]))
    assert out["param_map_calls_per_step"] == 3.0
    assert abs(out["param_map_share"] - (3 * 50 + 100) / 1000) < 1e-9


def test_no_parametrization_map_no_facts():
    from ddpdoctor.metrics.op_overhead import param_map_extras

    assert param_map_extras(spans([(0.0, 5.0)]), np.array([0.0]), np.array([10.0])) == {}


def test_operators_inside_the_optimizer_step_are_the_optimizers_not_the_models():
    """b5's Adam over 3,000 tensors: the optimizer's per-parameter loop is thousands of tiny operators; passed as
    another phase's time (breakdown: the loader's __next__ and the optimizer's step), they are left out."""
    model = [(i * 10.0, i * 10.0 + 5.0) for i in range(40)]  # 40 tiny ops in the first 400 µs
    optimizer = [(500.0 + i * 10.0, 505.0 + i * 10.0) for i in range(40)]  # 40 more inside the optimizer's step
    ws, we = np.array([0.0]), np.array([1000.0])
    everything = op_overhead_extras(spans(model + optimizer), iv.EMPTY, ws, we)
    step = iv.union(np.array([495.0]), np.array([900.0]))
    model_only = op_overhead_extras(spans(model + optimizer), step, ws, we)
    assert everything["cpu_ops_per_step"] == 80 and model_only["cpu_ops_per_step"] == 40
    assert abs(model_only["tiny_op_share"] - (40 * 5 + 39 * 5) / 1000) < 1e-9
    assert everything["tiny_op_share"] > 2 * model_only["tiny_op_share"] - 1e-9
