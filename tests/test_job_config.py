"""The job's own configuration, recorded by the capture agent: autograd anomaly mode (and what it costs),
float64 parameters (and how much slower float64 runs), the world size / rank passed to init_process_group.
Readers of the agent (capture/agent/settings.py, config_costs.py) on small objects, and the bundle facts
(bundle/job_config.py) on settings dicts built here."""

import pytest

from ddpdoctor.bundle.job_config import job_config_facts
from ddpdoctor.capture.agent import settings as agent_settings

# ------------------------------------------------------------------ capture: init_process_group's arguments


def test_init_call_reads_keywords_and_positions_beside_the_launcher_env():
    env = {"WORLD_SIZE": "2", "RANK": "1"}
    rec = agent_settings._init_call(("gloo",), {"world_size": 4, "rank": 1}, env)
    assert rec == {"world_size_arg": 4, "env_world_size": 2, "rank_arg": 1, "env_rank": 1}
    # init_process_group(backend, init_method, timeout, world_size, rank)
    rec = agent_settings._init_call(("gloo", "env://", None, 8, 3), {}, env)
    assert rec["world_size_arg"] == 8 and rec["rank_arg"] == 3


def test_init_call_not_passed_or_minus_one_is_none():
    rec = agent_settings._init_call(("gloo",), {"world_size": -1}, {})
    assert rec == {"world_size_arg": None, "env_world_size": None, "rank_arg": None, "env_rank": None}


def test_bytes_by_dtype_sums_parameter_bytes_per_dtype():
    torch = pytest.importorskip("torch")
    params = [torch.zeros(3, 4, dtype=torch.float64), torch.zeros(5, dtype=torch.float64), torch.zeros(2)]
    assert agent_settings._bytes_by_dtype(params) == {"float64": 17 * 8, "float32": 2 * 4}


# ------------------------------------------------------------------ capture: timings (torch, tiny)


def test_anomaly_cost_is_timed_and_the_scripts_mode_restored():
    torch = pytest.importorskip("torch")
    from ddpdoctor.capture.agent import config_costs

    for mode in (False, True):
        torch.autograd.set_detect_anomaly(mode)
        try:
            cost = config_costs.anomaly_cost(torch)
            assert torch.is_anomaly_enabled() is mode
        finally:
            torch.autograd.set_detect_anomaly(False)
        # formatting a stack of several frames per node: more than nothing, and a stored traceback
        assert cost["us_per_node"] > 0 and cost["frames"] >= 3
    # as deep as the model's nodes: the chain is padded to their mean traceback length (two functions in turn:
    # a traceback folds repeats of one line, which would hide the padding)
    deep = config_costs.anomaly_cost(torch, cost["frames"] + 20.0)
    assert deep["frames"] == cost["frames"] + 20 and not torch.is_anomaly_enabled()


def test_graph_nodes_counts_a_forwards_nodes_and_their_traceback_frames():
    torch = pytest.importorskip("torch")
    from ddpdoctor.capture.agent import config_costs

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    nodes, frames = config_costs.graph_nodes(model(torch.ones(3, 4)))
    assert nodes == 5 and frames == 0  # addmm, t (the weight), relu, addmm, t; no traceback with anomaly mode off
    torch.autograd.set_detect_anomaly(True)
    try:
        nodes2, frames2 = config_costs.graph_nodes({"out": (model(torch.ones(3, 4)),)})
    finally:
        torch.autograd.set_detect_anomaly(False)
    assert nodes2 == nodes and frames2 >= 3 * nodes


def test_float64_slowdown_only_with_float64_weights():
    torch = pytest.importorskip("torch")
    from ddpdoctor.capture.agent import config_costs

    assert config_costs.float64_slowdown(torch, list(torch.nn.Linear(8, 8).parameters())) is None
    ratio = config_costs.float64_slowdown(torch, list(torch.nn.Linear(256, 256).double().parameters()))
    assert ratio is not None and ratio > 0


# ------------------------------------------------------------------ bundle facts


def _rank(**fields):
    return {"rank": 0, **fields}


def test_anomaly_facts_and_the_lower_bound_cost():
    autograd = {
        "anomaly_enabled": True,
        "anomaly_check_nan": True,
        "anomaly_us_per_node": 50.0,
        "anomaly_timed_frames": 10,
        "graph_nodes_per_forward": 200,
        "graph_frames_per_forward": 4000,  # 20 frames per node: deeper than timed, never scaled up
    }
    d = _rank(autograd=autograd, step_time_s={"median": 0.1}, train={"micro_batches_per_step": 1.0})
    slower = dict(d, rank=1, autograd=dict(autograd, anomaly_us_per_node=80.0))  # its timing slowed by others
    f = job_config_facts({0: slower, 1: d})
    assert f["config.autograd.anomaly"] is True and f["config.autograd.anomaly_check_nan"] is True
    assert f["config.autograd.anomaly_ms_per_step"] == 10.0  # 50 µs x 200 nodes: the smaller rank's
    assert f["config.autograd.anomaly_ms_per_step.per_rank"] == {0: 16.0, 1: 10.0}
    assert f["config.autograd.anomaly_share"] == 0.1
    # shorter stacks than the timed one: scaled down; two forwards per optimizer step: twice
    shallow = dict(autograd, graph_frames_per_forward=1000)  # 5 frames per node
    d2 = _rank(autograd=shallow, step_time_s={"median": 0.1}, train={"micro_batches_per_step": 2.0})
    assert job_config_facts({0: d2})["config.autograd.anomaly_ms_per_step"] == 10.0  # 25 µs x 200 x 2


def test_anomaly_off_has_no_cost_and_nothing_recorded_is_absent():
    f = job_config_facts({0: _rank(autograd={"anomaly_enabled": False, "anomaly_check_nan": True})})
    assert f == {"config.autograd.anomaly": False, "config.autograd.anomaly_check_nan": True}
    assert job_config_facts({0: _rank(), 1: _rank(rank=1, autograd=None)}) == {}


def test_float64_share_and_slowdown():
    ddp = {"used": True, "param_bytes_by_dtype": {"float64": 300, "float32": 100}, "float64_slowdown": 2.2}
    f = job_config_facts({0: _rank(ddp=ddp)})
    assert f["config.ddp.float64_param_share"] == 0.75 and f["config.ddp.float64_slowdown"] == 2.2
    f32 = job_config_facts({0: _rank(ddp={"used": True, "param_bytes_by_dtype": {"float32": 100}})})
    assert f32 == {"config.ddp.float64_param_share": 0.0}
    assert job_config_facts({0: _rank(ddp={"used": False})}) == {}


def test_world_size_mismatch_only_when_both_are_known():
    init = {"world_size_arg": 4, "env_world_size": 2, "rank_arg": 0, "env_rank": 0}
    f = job_config_facts(
        {0: _rank(init_process_group=init), 1: _rank(rank=1, init_process_group=dict(init, rank_arg=1))}
    )
    assert f["config.init.world_size_arg"] == 4 and f["config.init.launcher_world_size"] == 2
    assert f["config.init.world_size_mismatch"] is True and f["config.init.rank_arg.per_rank"] == {0: 0, 1: 1}
    same = job_config_facts({0: _rank(init_process_group=dict(init, world_size_arg=2))})
    assert same["config.init.world_size_mismatch"] is False
    not_passed = job_config_facts({0: _rank(init_process_group=dict(init, world_size_arg=None))})
    assert "config.init.world_size_mismatch" not in not_passed and "config.init.world_size_arg" not in not_passed


def test_the_wrapped_init_process_group_keeps_torchs_signature():
    """Libraries probe `"device_id" in inspect.signature(torch.distributed.init_process_group).parameters`."""
    import inspect
    import types

    from ddpdoctor.capture.agent import patches

    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, device_id=None):
        return world_size

    seen = []
    mod = types.SimpleNamespace(init_process_group=init_process_group)
    patches.wrap(mod, "init_process_group", before=lambda *a, **k: seen.append(k), on_error=None)
    assert mod.init_process_group is not init_process_group
    assert "device_id" in inspect.signature(mod.init_process_group).parameters
    assert mod.init_process_group("gloo", world_size=4) == 4 and seen == [{"world_size": 4}]
    entry = next(p for p in patches.PATCHES if p.target == "init_process_group")
    assert entry.module == "torch.distributed.distributed_c10d" and entry.before == "settings.init_called"
