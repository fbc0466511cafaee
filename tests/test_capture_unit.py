"""`ddpdoctor run` pieces that need no training run: argument pass-through, which processes
the agent activates in, the output folder rules, the environment, the manifest status."""

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpdoctor.capture.agent import core as agent
from ddpdoctor.capture.host import launcher
from ddpdoctor.cli import main
from ddpdoctor.errors import InputError


@pytest.fixture
def captured(monkeypatch):
    seen = {}

    def fake_run_capture(opts):
        seen["opts"] = opts
        return launcher.RunResult(Path("x"), 7, "failed", {"ranks_present": [], "world_size": 2})

    monkeypatch.setattr(launcher, "run_capture", fake_run_capture)
    return seen


@pytest.mark.parametrize(
    "args, command",
    [
        (
            ["--", "torchrun", "--nproc_per_node=2", "train.py", "--lr", "0.1"],
            ["torchrun", "--nproc_per_node=2", "train.py", "--lr", "0.1"],
        ),
        (
            ["--", "python", "t.py", "a b", '"q"', "--", "--out", "x", "--force"],
            ["python", "t.py", "a b", '"q"', "--", "--out", "x", "--force"],
        ),
        (
            ["python", "-m", "torch.distributed.run", "t.py", "--warmup", "9"],
            ["python", "-m", "torch.distributed.run", "t.py", "--warmup", "9"],
        ),
    ],
)
def test_command_passes_through_untouched(captured, args, command):
    res = CliRunner().invoke(main, ["run", "--no-analyze", "--warmup", "2", "--active", "3", *args])
    assert res.exit_code == 7, res.output  # the training's exit code
    opts = captured["opts"]
    assert opts.command == command and opts.warmup == 2 and opts.active == 3 and not opts.keep_going


def test_missing_command_is_an_input_error():
    res = CliRunner().invoke(main, ["run", "--"])
    assert res.exit_code == 2 and "no command" in res.output


def test_unknown_program_is_one_line_exit_2(tmp_path):
    res = CliRunner().invoke(main, ["run", "--out", str(tmp_path / "o"), "--", "no-such-program-xyz"])
    assert res.exit_code == 2 and "command not found" in res.output and "Traceback" not in res.output


def test_cli_does_not_import_torch():
    import subprocess

    code = "import sys, ddpdoctor.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["python", "/v/bin/torchrun", "--nproc_per_node=2", "t.py"], True),
        (["python", "-m", "torch.distributed.run", "t.py"], True),
        (["python", "-mtorch.distributed.launch", "t.py"], True),
        (["python", "-u", "train.py", "-m", "torch.distributed.run"], False),
        (["python", "train.py"], False),
        (["python", "-c", "print(1)"], False),
        (["python", "/v/bin/accelerate", "launch", "train.py"], True),
        (["python", "/v/bin/deepspeed", "train.py"], True),
        (["python", "-m", "accelerate.commands.launch", "train.py"], True),
    ],
)
def test_launcher_process_detection(argv, expected):
    assert agent.is_launcher_process(argv) is expected


def test_activation_rules():
    base = {"DDPDOCTOR_BUNDLE": "/b", "DDPDOCTOR_LAUNCHER_PID": "100"}
    act = agent.should_activate
    assert act({**base, "RANK": "3", "LOCAL_RANK": "1"}, ["python", "train.py"], 55)  # torchrun worker
    assert act(base, ["python", "train.py"], 100)  # single process run
    assert not act(base, ["python", "train.py"], 55)  # some other python process, no rank
    assert not act({**base, "RANK": "0"}, ["python", "/v/bin/torchrun", "t.py"], 100)  # torchrun's agent
    assert not act({**base, "RANK": "0", "DDPDOCTOR_ACTIVE_PID": "7"}, ["python", "w.py"], 7)  # child of a rank
    assert not act(
        {**base, "RANK": "0"},
        ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()", "--multiprocessing-fork"],
        7,
    )  # DataLoader worker
    assert not act({"RANK": "0"}, ["python", "train.py"], 1)  # not under ddpdoctor
    assert act({**base, "SLURM_PROCID": "5"}, ["python", "train.py"], 9)  # srun / MPI tasks
    assert act({**base, "OMPI_COMM_WORLD_RANK": "1"}, ["python", "train.py"], 9)


def test_rank_identity_from_torchrun_then_slurm_or_mpi():
    a = agent.Agent({"DDPDOCTOR_BUNDLE": "/b", "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"})
    assert (a.rank, a.local_rank, a.world_size) == (5, 1, 8) and a.dir.endswith("ranks/rank5")
    a = agent.Agent({"DDPDOCTOR_BUNDLE": "/b", "RANK": "2", "SLURM_PROCID": "0", "WORLD_SIZE": "4"})
    assert (a.rank, a.world_size) == (2, 4)


def test_existing_output_folder_needs_force(tmp_path):
    out = tmp_path / "o"
    launcher.prepare_out_dir(out, force=False)
    assert (out / "ranks").is_dir() and (out / "hosts").is_dir() and (out / "flight_recorder").is_dir()
    (out / "manifest.json").write_text("{}")
    with pytest.raises(InputError, match="already exists"):
        launcher.prepare_out_dir(out, force=False)
    launcher.prepare_out_dir(out, force=True)  # an earlier bundle may be replaced
    assert not (out / "manifest.json").exists()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "precious.txt").write_text("x")
    with pytest.raises(InputError, match="not a ddpdoctor bundle"):
        launcher.prepare_out_dir(other, force=True)
    assert (other / "precious.txt").exists()


def test_default_out_dir_has_a_timestamp():
    import datetime as dt

    assert str(launcher.default_out_dir(dt.datetime(2026, 1, 2, 3, 4, 5))) == "ddpdoctor-out-20260102-030405"


def test_environment_keeps_what_the_user_set(tmp_path):
    opts = launcher.RunOptions(command=["x"], warmup=3, active=4)
    env, changed = launcher.capture_env(
        {"NCCL_DEBUG": "WARN", "PYTHONPATH": "/mine", "HF_TOKEN": "t"},
        tmp_path,
        tmp_path / "inj",
        opts,
        "rid",
        "/f1",
        "/f2",
    )
    assert env["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG" not in changed
    assert env["NCCL_DEBUG_FILE"].endswith("nccl.%h.%p.log") and env["DDPDOCTOR_NCCL_FILE_OWNED"] == "1"
    assert env["TORCH_FR_BUFFER_SIZE"] and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_FR_DUMP_TEMP_FILE"].startswith(str(tmp_path / "flight_recorder"))
    assert env["PYTHONPATH"] == f"{tmp_path / 'inj'}:/mine" and env["HF_TOKEN"] == "t"
    assert env["DDPDOCTOR_WARMUP"] == "3" and env["DDPDOCTOR_ACTIVE"] == "4"
    old, _ = launcher.capture_env({}, tmp_path, tmp_path, opts, "r", "a", "b", torch_version="2.4.1+cu121")
    assert old["TORCH_NCCL_TRACE_BUFFER_SIZE"] and "TORCH_FR_BUFFER_SIZE" not in old  # the names torch 2.4 reads
    assert old["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].startswith(str(tmp_path / "flight_recorder"))
    env2, _ = launcher.capture_env({"NCCL_DEBUG_FILE": "/my/file"}, tmp_path, tmp_path, opts, "r", "a", "b")
    assert env2["NCCL_DEBUG_FILE"] == "/my/file" and "DDPDOCTOR_NCCL_FILE_OWNED" not in env2


def _rank(out, r, complete=True, world=2):
    d = out / "ranks" / f"rank{r}"
    d.mkdir(parents=True)
    (d / "settings.json").write_text(
        json.dumps(
            {
                "schema": "ddpdoctor.settings/1",
                "rank": r,
                "world_size": world,
                "hostname": "h",
                "steps_completed": 10,
                "cpu_affinity": [0, 1],
                "local_world_size": 2,
                "window": {"complete": complete},
            }
        )
    )
    (d / f"rank{r}.pt.trace.json.gz").write_bytes(b"x")


@pytest.mark.parametrize(
    "complete, code, interrupted, status",
    [
        (True, 0, None, "complete"),
        (False, 0, None, "partial"),
        (True, 1, None, "failed"),
        # interrupted after every window was recorded: the bundle is whole (issue 27: --keep-going, then Ctrl-C)
        (True, 143, "SIGTERM", "complete"),
        (True, 130, "SIGINT", "complete"),
        (False, 130, "SIGINT", "partial"),
    ],
)
def test_manifest_status(tmp_path, complete, code, interrupted, status):
    _rank(tmp_path, 0)
    _rank(tmp_path, 1, complete=complete)
    (tmp_path / "flight_recorder").mkdir()
    host = {"hostname": "h"}
    m = launcher.finish_bundle(tmp_path, {"start_unix": 0.0}, host, code, interrupted)
    assert m["status"] == status and m["exit_code"] == code and m["ranks_present"] == [0, 1] and m["world_size"] == 2
    assert host["local_world_size"] == 2 and host["cpus_per_local_rank"] == 1.0


def test_missing_rank_makes_a_partial_bundle(tmp_path):
    _rank(tmp_path, 0, world=4)
    m = launcher.finish_bundle(tmp_path, {"start_unix": 0.0}, {"hostname": "h"}, 0, None)
    assert m["status"] == "partial" and m["world_size"] == 4


def test_single_process_through_a_shell_wrapper(tmp_path):
    """`ddpdoctor run -- bash run.sh` whose script runs `python train.py`: still the top Python process."""
    import os
    import subprocess

    script = tmp_path / "run.sh"
    script.write_text(f"{sys.executable} -c 'import os; print(os.getppid())'\n")
    shell_child = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True)
    assert agent.started_by_launcher(int(shell_child.stdout), str(os.getpid())) is False  # that bash is gone
    assert agent.started_by_launcher(os.getppid(), str(os.getppid()))
    assert agent.started_by_launcher(os.getpid(), str(os.getppid())) is False  # pytest is not a shell


def test_private_folders_of_killed_runs_are_removed(tmp_path, monkeypatch):
    import os
    import time

    monkeypatch.setattr(launcher.tempfile, "gettempdir", lambda: str(tmp_path))
    dead, alive, young = (tmp_path / f"ddpdoctor-run-{n}" for n in ("dead", "alive", "young"))
    for d, pid in ((dead, 2**22 + 12345), (alive, os.getpid()), (young, 2**22 + 12345)):
        d.mkdir()
        (d / "owner.pid").write_text(str(pid))
    old = time.time() - 3600
    for d in (dead, alive):
        os.utime(d, (old, old))
    launcher._remove_stale_private_dirs()
    assert not dead.exists() and alive.exists() and young.exists()
