"""Live (real torchrun, gloo, CPU): the job's own configuration, recorded by the capture agent, names the cause.

- autograd anomaly detection left on (examples/scenarios/anomaly_detection_left_on.py): the agent reads the
  mode when the window starts and times what it adds per autograd node; CP004 fires with that cost and its
  fix turns the mode off;
- a float64 model (float64_model_from_numpy.py): the DDP model's parameter bytes per dtype and the float64 /
  float32 matmul time; CP005 fires and its fix is float32;
- init_process_group(world_size=4) under a launcher that started 2 processes (hardcoded_world_size_4.py): the
  agent records the argument beside WORLD_SIZE; the rendezvous failure's first fix is the world size.
"""

import pytest
from scenario_run import record_scenario

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")


def _run(tmp_path, script):
    res, _out, rep = record_scenario(tmp_path, script)
    return res, rep


def _finding(rep, rule):
    found = [f for f in rep.diagnosis.findings if f.rule == rule]
    assert found, [f.rule for f in rep.diagnosis.findings]
    return found[0]


def test_live_anomaly_detection_left_on(tmp_path):
    res, rep = _run(tmp_path, "anomaly_detection_left_on.py")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    f = rep.facts
    assert f["config.autograd.anomaly"] is True
    # timed in the ranks: a lower bound of what the tracebacks cost (the scenario's ablation: ~2/3 of the step)
    assert 0 < f["config.autograd.anomaly_share"] <= 1 and f["config.autograd.anomaly_ms_per_step"] > 0
    cp4 = _finding(rep, "CP004")
    assert cp4.cost is not None and cp4.cost > 0
    # the cost is a lower bound (cost_is = "lower_bound"): every output says "at least", never "up to"
    assert cp4.speedup_is_lower_bound
    v = rep.diagnosis.verdict
    if v.rule == "CP004":
        assert v.speedup_is_lower_bound and "Removing it: at least" in v.summary and "up to" not in v.summary
    assert "detect_anomaly" in cp4.fixes[0].title and "set_detect_anomaly(False)" in cp4.fixes[0].title
    rules = [x.rule for x in rep.diagnosis.findings]
    assert "CP001" not in rules or rules.index("CP004") < rules.index("CP001")  # never behind the generic tip


def test_live_float64_model(tmp_path):
    res, rep = _run(tmp_path, "float64_model_from_numpy.py")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    f = rep.facts
    assert f["config.ddp.float64_param_share"] == 1.0 and f["config.ddp.float64_slowdown"] > 1.0
    cp5 = _finding(rep, "CP005")
    assert cp5.cost is not None and cp5.cost > 0 and cp5.category == "compute"
    assert "float32" in cp5.fixes[0].title and "model.float()" in cp5.fixes[0].title
    assert "CP004" not in [x.rule for x in rep.diagnosis.findings]  # anomaly mode is off here


def test_live_world_size_passed_to_init_differs_from_the_launchers(tmp_path):
    res, rep = _run(tmp_path, "hardcoded_world_size_4.py")
    assert res.returncode != 0
    f = rep.facts
    assert f["config.init.world_size_arg"] == 4 and f["config.init.launcher_world_size"] == 2
    assert f["config.init.world_size_mismatch"] is True and rep.facts["run.status"] == "failed"
    first = rep.diagnosis.findings[0]
    assert first.rule == "FL012", [x.rule for x in rep.diagnosis.findings]
    assert "passed world_size=4 to init_process_group, but the launcher started 2 processes" in first.summary
    assert "world_size" in first.fixes[0].title and "use world_size from the environment" in first.fixes[0].title
