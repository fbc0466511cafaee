"""Who is a rank (issue 36), without torch: how each process under capture takes part, which launcher a
joined rank names, and the patch router a forked child points at its own target."""

import types

from ddpdoctor.capture.agent import join, patches, process

SPAWN_CHILD = ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()", "--multiprocessing-fork"]
BASE = {"DDPDOCTOR_BUNDLE": "/b", "DDPDOCTOR_LAUNCHER_PID": "100"}


def test_activation_sorts_processes():
    act = process.activation
    assert act({**BASE, "RANK": "1", "LOCAL_RANK": "1"}, ["python", "train.py"], 55) == process.RANK
    assert act({**BASE, "SLURM_PROCID": "3"}, ["python", "train.py"], 55) == process.RANK
    # the command's own process: provisional (rank 0 if nothing joins, else nothing)
    assert act(BASE, ["python", "train.py"], 100) == process.PROVISIONAL
    # spawn's children (the tutorial's ranks, DataLoader workers), Ray's workers, any other process: on join
    assert act({**BASE, "DDPDOCTOR_ACTIVE_PID": "7"}, SPAWN_CHILD, 7) == process.ON_JOIN
    assert act({**BASE, "RANK": "0", "DDPDOCTOR_ACTIVE_PID": "7"}, SPAWN_CHILD, 7) == process.ON_JOIN
    assert act(BASE, ["python", "default_worker.py"], 55) == process.ON_JOIN
    # never: not under capture, a launcher, a tool process
    assert act({"RANK": "0"}, ["python", "train.py"], 1) is None
    assert act({**BASE, "RANK": "0"}, ["python", "/v/bin/torchrun", "t.py"], 100) is None
    assert act(BASE, ["python", "-c", "from multiprocessing.resource_tracker import main"], 100) is None
    # should_activate (start recording at start-up) keeps its meaning
    assert process.should_activate(BASE, ["python", "train.py"], 100)
    assert not process.should_activate(BASE, SPAWN_CHILD, 100)


def test_launcher_recognised():
    of = join.launcher_of
    assert of({"TORCHELASTIC_RUN_ID": "x"}, ["python", "t.py"], {}, False, False) == "torchrun"
    assert of({"TORCHELASTIC_RUN_ID": "x", "ACCELERATE_MIXED_PRECISION": "no"}, [], {}, False, False) == "accelerate"
    assert of({"SLURM_PROCID": "0"}, [], {}, False, False) == "slurm"
    assert of({"OMPI_COMM_WORLD_RANK": "0"}, [], {}, False, False) == "mpirun"
    assert of({}, SPAWN_CHILD, {}, True, False) == "multiprocessing spawn"
    assert of({}, SPAWN_CHILD, {"ignite.distributed": object()}, True, False) == "ignite"
    assert of({}, ["python", "t.py"], {}, False, True) == "multiprocessing"
    assert of({"RANK": "1"}, ["python", "t.py"], {"ray.train": object()}, False, False) == "ray"
    # Ray Train sets ACCELERATE_TORCH_DEVICE in its workers (ray/train/torch/config.py; Ray 2.60 read "accelerate")
    ray_worker = {"RANK": "1", "ACCELERATE_TORCH_DEVICE": "cpu"}
    assert of(ray_worker, ["python", "default_worker.py"], {"ray.train": object()}, False, False) == "ray"
    assert of({"LOCAL_RANK": "1"}, ["python", "t.py"], {"lightning": object()}, False, False) == "lightning"
    assert of({}, ["python", "t.py"], {}, False, False) == "plain"
    assert set(join.LAUNCHERS) >= {"torchrun", "ignite", "ray", "slurm", "mpirun", "accelerate", "lightning", "plain"}


def test_rank_env_takes_the_groups_identity_and_leaves_the_launchers():
    assert join.rank_env({"X": "1"}, 1, 2, 1) == {"X": "1", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    assert join.rank_env({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, 5, 8, 1)["RANK"] == "5"
    assert join.rank_env({"RANK": "0", "WORLD_SIZE": "1"}, 3, 4, 3)["RANK"] == "3"  # the group wins


class _Target:
    def __init__(self):
        self.calls = []

    def process_group_joined(self, result, *a, **k):
        self.calls.append(("joined", result, a))

    def internal_error(self, place, exc):
        self.calls.append(("error", place))


def test_the_router_resolves_its_target_at_each_call_and_skips_what_it_lacks():
    first, second = _Target(), _Target()
    router = patches.Router(first)
    mod = types.SimpleNamespace(init_process_group=lambda backend, **kw: f"pg:{backend}")
    patches.apply(router, join.C10D, mod, join.JOIN_PATCHES)
    assert mod.init_process_group("gloo") == "pg:gloo" and first.calls == [("joined", "pg:gloo", ("gloo",))]
    router.agent = second  # a forked child points the inherited wrappers at its own target
    mod.init_process_group("nccl")
    assert second.calls == [("joined", "pg:nccl", ("nccl",))] and len(first.calls) == 1
    router.agent = object()  # a target without the hook: the call goes on, nothing runs
    assert mod.init_process_group("gloo") == "pg:gloo"
    patches.apply(router, join.C10D, mod, join.JOIN_PATCHES)  # already wrapped: not twice
    router.agent = second
    mod.init_process_group("gloo")
    assert len(second.calls) == 2


def test_pending_becomes_a_rank_once_and_hands_later_joins_to_it():
    made = []

    class Agent(_Target):
        settings = types.SimpleNamespace(init_called=lambda *a, **k: made.append(("init", a)))

    def become(args, kwargs):
        made.append("agent")
        return Agent()

    p = join.Pending(become)
    p.process_group_joined("pg", "gloo")
    assert made == ["agent", ("init", ("gloo",))] and p.agent.calls == [("joined", "pg", ("gloo",))]
    p.process_group_joined("pg2", "gloo")  # a re-init: the same agent records it
    assert made.count("agent") == 1 and p.agent.calls[-1] == ("joined", "pg2", ("gloo",))
    refused = join.Pending(lambda a, k: None)  # another run's bundle: no capture, asked once
    refused.process_group_joined("pg", "gloo")
    refused.process_group_joined("pg", "gloo")
    assert refused.agent is None and refused.tried


def test_run_says_an_interrupt_before_the_window_without_blaming_warmup(tmp_path, capsys):
    from ddpdoctor.cli import run as cli_run

    stepped = [{"steps_completed": 2, "process_groups_joined": 1}]
    cli_run._analyze(tmp_path, False, stepped, 5, [], interrupted="SIGINT")
    err = capsys.readouterr().err
    assert "you stopped it (Ctrl-C) after 2 steps, before the window (--warmup 5)" in err and "smaller" not in err
    cli_run._analyze(tmp_path, False, stepped, 5, [])
    assert "use a smaller --warmup" in capsys.readouterr().err
    idle = [{"steps_completed": 0, "process_groups_joined": 0}]
    cli_run._analyze(tmp_path, False, idle, 5, [])
    assert "no trace was recorded: no process joined a process group: " in capsys.readouterr().err
