"""Framework support without running a framework: fix phrasing per framework, which processes
are ranks (Lightning's re-executed script, the child of `accelerate launch`), what shards the
data, the bundle's notes, and the accumulation facts."""

import importlib.util
import types
from pathlib import Path

import pytest

from ddpdoctor.capture.host.manifest import bundle_notes, requested_processes
from ddpdoctor.rules_engine.engine import evaluate
from ddpdoctor.rules_engine.frameworks import framework_table, phrase
from ddpdoctor.rules_engine.registry import load_rules

CAPTURE = Path(__file__).resolve().parents[2] / "ddpdoctor" / "capture" / "agent"


def _part(name):
    spec = importlib.util.spec_from_file_location(f"fw_test_{name}", CAPTURE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


process = _part("process")
settings = _part("settings")


def _rule(rule_id):
    return load_rules().get(rule_id)


@pytest.mark.parametrize(
    "framework, expected",
    [
        ("hf_trainer", "TrainingArguments(..., ddp_find_unused_parameters=False)"),
        ("lightning", "Trainer(strategy=DDPStrategy(find_unused_parameters=False))"),
        ("accelerate", "Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=False)])"),
    ],
)
def test_fix_is_phrased_in_the_frameworks_settings_first(framework, expected):
    facts = {
        "config.ddp.find_unused_parameters": True,
        "config.ddp.unused_parameter_count": 0,
        "config.ddp.param_count": 10,
        "run.framework": framework,
    }
    out = evaluate(_rule("CF003"), facts)
    fix = out.finding.fixes[0]
    assert fix.framework == framework and fix.knob == "ddp.find_unused_parameters"
    first_line = fix.change.splitlines()[0]
    assert expected in first_line
    assert "DistributedDataParallel(" in fix.change  # raw PyTorch follows as context


def test_raw_pytorch_keeps_the_rules_own_text():
    facts = {
        "config.ddp.find_unused_parameters": True,
        "config.ddp.unused_parameter_count": 0,
        "config.ddp.param_count": 10,
        "run.framework": "pytorch",
    }
    fix = evaluate(_rule("CF003"), facts).finding.fixes[0]
    assert fix.framework is None and fix.change.lstrip().startswith("- DistributedDataParallel(")
    assert phrase(None, "ddp.bucket_cap_mb", "50") is None


def test_every_framework_knob_is_in_the_contract_vocabulary():
    vocabulary = {
        "dataloader.num_workers",
        "dataloader.pin_memory",
        "dataloader.persistent_workers",
        "dataloader.prefetch_factor",
        "dataloader.batch_size",
        "ddp.bucket_cap_mb",
        "ddp.find_unused_parameters",
        "ddp.gradient_as_bucket_view",
        "ddp.static_graph",
        "ddp.comm_hook",
        "train.gradient_accumulation_steps",
        "env.NCCL_SOCKET_IFNAME",
        "env.GLOO_SOCKET_IFNAME",
        "env.NCCL_P2P_DISABLE",
        "env.NCCL_IB_DISABLE",
        "env.OMP_NUM_THREADS",
        "torch.num_threads",
    }
    table = framework_table()
    assert set(table) == {"hf_trainer", "accelerate", "lightning"}
    for entry in table.values():
        assert set(entry["knobs"]) <= vocabulary
    assert phrase("hf_trainer", "ddp.bucket_cap_mb", "100").setting == "TrainingArguments(..., ddp_bucket_cap_mb=100)"
    assert phrase("lightning", "train.gradient_accumulation_steps", "4").setting == "Trainer(accumulate_grad_batches=4)"


def test_cf001_is_quiet_when_something_else_shards_the_data():
    # fires only on evidence that the ranks read the same samples (issue 10)
    base = {"run.world_size": 2, "config.dataloader.sampler": "SequentialSampler", "data.same_first_batches": True}
    assert evaluate(_rule("CF001"), base).status == "fire"
    assert evaluate(_rule("CF001"), dict(base, **{"data.sharded_by": "BatchSamplerShard"})).status == "quiet"


def test_lightning_rank_started_by_rank_0_is_a_rank():
    env = {
        "DDPDOCTOR_BUNDLE": "/b",
        "DDPDOCTOR_ACTIVE_PID": "10",
        "DDPDOCTOR_ACTIVE_RANK": "0",
        "LOCAL_RANK": "1",
        "NODE_RANK": "0",
        "WORLD_SIZE": "2",
    }
    assert process.should_activate(env, ["python", "train.py"], 10)
    assert process.resolve_rank(env) == 1
    # a DataLoader worker or any other child of rank 0 carries rank 0's own variables: not a rank
    worker = dict(env, LOCAL_RANK="0")
    assert not process.should_activate(worker, ["python", "train.py"], 10)
    assert not process.should_activate(
        dict(env, LOCAL_RANK="1"),
        ["python", "-c", "from multiprocessing.spawn import spawn_main", "--multiprocessing-fork"],
        10,
    )
    # second node of a Lightning job: NODE_RANK x ranks per node + LOCAL_RANK
    assert process.resolve_rank({"LOCAL_RANK": "1", "NODE_RANK": "1", "WORLD_SIZE": "4", "NUM_NODES": "2"}) == 3
    assert process.resolve_rank({"RANK": "5", "LOCAL_RANK": "1"}) == 5


def test_requested_processes_and_bundle_notes():
    argv = ["accelerate", "launch", "--cpu", "--num_processes", "2", "train.py", "--num_processes", "9"]
    assert requested_processes(argv) == 2
    assert requested_processes(["torchrun", "--nproc-per-node=4", "t.py"]) == 4
    assert requested_processes(["python", "t.py"]) is None
    notes = bundle_notes(argv, [0], [0], 1, {0: {}})
    assert len(notes) == 1 and "asked for 2 processes but 1 rank ran" in notes[0] and "--multi_gpu" in notes[0]
    notes = bundle_notes(
        ["python", "t.py"],
        [0],
        [],
        1,
        {0: {"steps_completed": 3, "window": {"warmup": 5}, "exit": {"reason": "end of program"}}},
    )
    assert notes == ["rank 0 recorded no trace: training ended after 3 optimizer steps, before the window (--warmup 5)"]
    # issue 36: a process is a rank once it joins a process group; none joined, none stepped
    assert bundle_notes(["bash", "x.sh"], [], [], None, {})[0].startswith("no process joined a process group: ")
    idle = {0: {"steps_completed": 0, "process_groups_joined": 0, "window": {"warmup": 5}}}
    assert bundle_notes(["python", "t.py"], [0], [], 1, idle) == [
        "no process joined a process group: no process of the command called torch.distributed.init_process_group "
        "(a rank is recorded from the moment it joins one), and the command's own process ran no training step; "
        "see launcher.log"
    ]
    again = {r: {"process_groups_joined": 2, "window_process_group": 1, "steps_completed": 9} for r in (0, 1)}
    assert bundle_notes(["python", "t.py"], [0, 1], [0, 1], 2, again) == [
        "ranks 0, 1 joined a process group again after destroy_process_group: the recorded window belongs to the "
        "first group"
    ]


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _named(cls_name, **kw):
    return type(cls_name, (_Obj,), {})(**kw)


def test_sharding_is_found_in_the_loaders_chain():
    seq = _named("SequentialSampler")
    accel = _named(
        "DataLoaderShard",
        sampler=seq,
        batch_sampler=_named("BatchSamplerShard", batch_sampler=_named("BatchSampler", sampler=seq)),
        dataset=_named("TensorDataset"),
    )
    assert settings._sharded_by(accel, accel.sampler, accel.batch_sampler) == "BatchSamplerShard"
    it = _named(
        "DataLoader", sampler=None, batch_sampler=None, dataset=_named("IterableDatasetShard", dataset=_named("Stream"))
    )
    assert settings._sharded_by(it, None, None) == "IterableDatasetShard"
    hf = _named(
        "DataLoader",
        sampler=None,
        batch_sampler=None,
        dataset=_named("IterableDataset", _distributed=types.SimpleNamespace(rank=1, world_size=2)),
    )
    assert settings._sharded_by(hf, None, None) == "split_dataset_by_node"
    lt = _named("DataLoader", sampler=_named("DistributedSamplerWrapper"), batch_sampler=None, dataset=_named("D"))
    assert settings._sharded_by(lt, lt.sampler, None) == "DistributedSamplerWrapper"
    plain = _named("DataLoader", sampler=seq, batch_sampler=_named("BatchSampler", sampler=seq), dataset=_named("D"))
    assert settings._sharded_by(plain, plain.sampler, plain.batch_sampler) is None


def test_framework_from_the_call_stack():
    def frames(*files):
        f = None
        for name in files:
            f = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename=name), f_back=f)
        return f

    site = "/venv/lib/python3.11/site-packages"
    assert (
        settings._framework_from_stack(
            frames("train.py", f"{site}/transformers/trainer.py", f"{site}/accelerate/optimizer.py")
        )
        == "hf_trainer"
    )
    assert (
        settings._framework_from_stack(
            frames("train.py", f"{site}/lightning/pytorch/loops/fit_loop.py", f"{site}/accelerate/optimizer.py")
        )
        == "lightning"
    )
    assert settings._framework_from_stack(frames("train.py", f"{site}/accelerate/optimizer.py")) == "accelerate"
    assert settings._framework_from_stack(frames("train.py")) is None
    assert settings._framework_from_modules({"torch": 1}) == "pytorch"
