"""Live (real torchrun, gloo, CPU): a recurrent cell stepped in a Python loop is host-bound.

Thousands of operators of a few µs each per step: the trace's training thread shows the step spent in
operators shorter than 50 µs and the Python between them, and the verdict's rule is CP002 (per-operator
overhead), not the generic compute-bound CP001.
"""

import pytest
from scenario_run import record_scenario

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")


def test_live_python_loop_of_tiny_operators_is_host_bound(tmp_path):
    res, _out, rep = record_scenario(tmp_path, "python_unrolled_rnn_host_bound.py", timeout=240)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    v = rep.diagnosis.verdict
    assert v.bottleneck == "compute" and v.rule == "CP002", (v, [f.rule for f in rep.diagnosis.findings])
    f = next(x for x in rep.diagnosis.findings if x.rule == "CP002")
    ops = rep.facts["rank.cpu_ops_per_step"].values
    assert ops.size == 2 and ops.min() > 1000, ops
    assert "operators per step on the training thread" in f.summary
    assert f.fixes[0].title.startswith("Give each operator more work")
