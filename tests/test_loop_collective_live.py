"""Live (real torchrun, gloo, CPU): the script's own all_gather_object every step is timed on every rank by the
stack sampler and named by its call site (bundle/loop_collectives.py), and CM001, where it fires, leads with it."""

import pytest
from scenario_run import record_scenario

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")


def test_live_all_gather_object_every_step_is_named(tmp_path):
    res, _out, rep = record_scenario(tmp_path, "all_gather_object_metrics.py", timeout=240)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    f = rep.facts
    assert f["python.loop_collective.call"] == "all_gather_object" and f["python.loop_collective.object_call"] is True
    assert "gather_predictions (all_gather_object_metrics.py:" in f["python.loop_collective.where"]
    assert f["python.loop_collective.share"] >= 0.05, f["python.loop_collective.share"]
    cm = [x for x in rep.diagnosis.findings if x.rule == "CM001"]
    if cm:
        assert cm[0].fixes[0].title.startswith("torch.distributed.all_gather_object in gather_predictions")
