"""DDPDOCTOR_CAPTURE=DIR (issue 31 item 3): capture switched on from the job's environment, with no
`ddpdoctor run` around the launcher.  The same job (examples/slow_rank.py: rank 1 late) under torchrun
with the variable set, as plain `python` ranks started by a shell loop (the srun/mpirun shape), and
under `ddpdoctor run`: the same bundle layout, the same manifest fields, the same verdict."""

import json
import os
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from subprocesses import project_env

ROOT = Path(__file__).resolve().parents[2]
SLOW_RANK = ROOT / "examples" / "slow_rank.py"
PTH = ROOT / "ddpdoctor" / "capture" / "ddpdoctor_capture.pth"


def _installed_pth() -> Path | None:
    for key in ("purelib", "platlib"):
        p = Path(sysconfig.get_paths()[key]) / PTH.name
        if p.is_file():
            return p
    return None


needs_pth = pytest.mark.skipif(
    _installed_pth() is None,
    reason="ddpdoctor is not pip-installed in this interpreter (the switch's .pth "
    "comes with `pip install`, editable or not)",
)


def _env(**extra):
    """This checkout first on the path, so the installed .pth imports this checkout's ddpdoctor."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DDPDOCTOR_")
        and k
        not in (
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "SLURM_PROCID",
            "OMPI_COMM_WORLD_RANK",
            "PMI_RANK",
        )
    }
    return project_env(extra, base=env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _layout(out: Path) -> set[str]:
    """The bundle's files, rank numbers kept, the per-run parts left out."""
    skip = ("report/", "launcher.log")
    return {
        str(p.relative_to(out))
        for p in out.rglob("*")
        if p.is_file() and not str(p.relative_to(out)).startswith(skip) and p.name != "stacks.faulthandler"
    }


def _verdict(out: Path) -> dict:
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


# ---------------------------------------------------------------------- start-up safety (no torch)


def test_the_pth_installed_is_the_packaged_one_and_one_line():
    text = PTH.read_text()
    assert len(text.strip().splitlines()) == 1 and text.startswith('import os; os.environ.get("DDPDOCTOR_CAPTURE")')
    installed = _installed_pth()
    if installed is None:
        pytest.skip("ddpdoctor is not pip-installed in this interpreter")
    assert installed.read_text() == text


@needs_pth
def test_unset_costs_no_import():
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, text=True, timeout=60, env=_env()
    )
    assert res.returncode == 0 and "ddpdoctor" not in res.stderr


@needs_pth
def test_a_broken_ddpdoctor_or_unwritable_folder_never_breaks_start_up(tmp_path):
    fake = tmp_path / "fake" / "ddpdoctor"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('broken install')\n")
    env = _env(DDPDOCTOR_CAPTURE=str(tmp_path / "b"), RANK="0", WORLD_SIZE="1")
    env["PYTHONPATH"] = str(tmp_path / "fake")
    res = subprocess.run([sys.executable, "-c", "print('ok')"], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0 and res.stdout == "ok\n"
    assert res.stderr.count("\n") == 1 and "DDPDOCTOR_CAPTURE ignored" in res.stderr and "broken install" in res.stderr
    res = subprocess.run(
        [sys.executable, "-c", "print('ok')"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(DDPDOCTOR_CAPTURE="/proc/ddpdoctor-cannot-write-here", RANK="0", WORLD_SIZE="1"),
    )
    assert res.returncode == 0 and res.stdout == "ok\n"
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("ddpdoctor: capture disabled in pid"), res.stderr


@needs_pth
def test_a_process_that_is_not_a_rank_is_left_alone(tmp_path):
    res = subprocess.run(
        [sys.executable, "-c", "print('ok')"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(DDPDOCTOR_CAPTURE=str(tmp_path / "b")),
    )
    assert res.returncode == 0 and res.stdout == "ok\n" and res.stderr == "" and not (tmp_path / "b").exists()
    # ddpdoctor's own process under srun (rank variables set) is not a rank either
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(DDPDOCTOR_CAPTURE=str(tmp_path / "b"), SLURM_PROCID="0"),
    )
    assert res.returncode == 0 and res.stderr == "" and not (tmp_path / "b").exists()


# ---------------------------------------------------------------------- the same job three ways


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    pytest.importorskip("torch")
    if _installed_pth() is None:
        pytest.skip("ddpdoctor is not pip-installed in this interpreter")
    base = tmp_path_factory.mktemp("envswitch")
    out = {}
    # 1. torchrun, the variable set, no `ddpdoctor run`
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--rdzv-endpoint=localhost:0",
            "--rdzv-backend=c10d",
            str(SLOW_RANK),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=_env(DDPDOCTOR_CAPTURE=str(base / "torchrun")),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out["torchrun"] = (base / "torchrun", res)
    # 2. plain python ranks from a shell loop: the srun / mpirun shape
    # OMP_NUM_THREADS=1 as torchrun sets it: the same job, not two ranks fighting over both cores
    loop = (
        "for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d OMP_NUM_THREADS=1 "
        '"%s" "%s" & done; wait' % (_free_port(), sys.executable, SLOW_RANK)
    )
    res = subprocess.run(
        ["bash", "-c", loop],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=_env(DDPDOCTOR_CAPTURE=str(base / "loop")),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out["loop"] = (base / "loop", res)
    # 3. `ddpdoctor run` on the same job (--keep-going: the switch lets training run on by default)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--out",
            str(base / "run"),
            "--keep-going",
            "--no-analyze",
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--rdzv-endpoint=localhost:0",
            "--rdzv-backend=c10d",
            str(SLOW_RANK),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=_env(),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out["run"] = (base / "run", res)
    return out


@pytest.mark.live
@pytest.mark.parametrize("shape", ["torchrun", "loop"])
def test_the_switch_makes_the_bundle_run_makes(bundles, shape):
    env_out, res = bundles[shape]
    run_out, _ = bundles["run"]
    assert _layout(env_out) == _layout(run_out) - {"launcher.log"}
    m_env = json.loads((env_out / "manifest.json").read_text())
    m_run = json.loads((run_out / "manifest.json").read_text())
    assert set(m_run) - set(m_env) <= {"orphans_killed"}, set(m_run) - set(m_env)
    for key in (
        "schema",
        "capture_version",
        "status",
        "exit_code",
        "world_size",
        "ranks_present",
        "ranks_seen",
        "windows_complete",
        "steps_completed",
        "nnodes",
        "hosts",
        "host_files",
        "torch_version",
    ):
        assert m_env[key] == m_run[key], key
    assert m_env["status"] == "complete" and m_env["capture"] == "environment" and m_env["launcher_log"] is None
    # what the ranks of one job share: torchrun's run id (here "none": no --standalone), else the rendezvous
    assert (
        m_env["run_id"]
        == ("rendezvous:localhost:" if shape == "torchrun" else "rendezvous:127.0.0.1:")
        + m_env["run_id"].rsplit(":", 1)[1]
    )
    assert m_env["end_time"] and not (env_out / ".ddpdoctor-env").exists()
    host = json.loads((env_out / m_env["host_files"][0]).read_text())
    assert host["schema"] == "ddpdoctor.host/1" and host["local_world_size"] == 2
    # the same diagnosis: rank 1 is the straggler
    v_env, v_run = _verdict(env_out), _verdict(run_out)
    assert v_env["verdict"]["bottleneck"] == v_run["verdict"]["bottleneck"] == "imbalance"
    assert [f["rule"] for f in v_env["findings"]][:1] == [f["rule"] for f in v_run["findings"]][:1]
    assert v_env["findings"][0]["ranks"] == v_run["findings"][0]["ranks"] == [1]


@pytest.mark.live
@pytest.mark.parametrize("shape", ["torchrun", "loop"])
def test_the_last_rank_analyzes_and_says_where(bundles, shape):
    env_out, res = bundles[shape]
    report = json.loads((env_out / "report" / "report.json").read_text())
    assert report["verdict"]["bottleneck"] == "imbalance"
    said = [ln for ln in res.stderr.splitlines() if ln.startswith(f"ddpdoctor: capture {env_out}:")]
    assert len(said) == 1 and "status complete, traces from 2 of 2 ranks" in said[0] and "report.md" in said[0]


@pytest.mark.live
def test_a_folder_holding_another_runs_bundle_is_not_written(bundles):
    env_out, _ = bundles["loop"]
    before = sorted(str(p) for p in env_out.rglob("*"))
    res = subprocess.run(
        [sys.executable, "-c", "print('ok')"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(DDPDOCTOR_CAPTURE=str(env_out), RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="1"),
    )
    assert res.returncode == 0 and res.stdout == "ok\n"
    assert "holds another run's bundle: capture is off" in res.stderr and res.stderr.count("\n") == 1
    assert sorted(str(p) for p in env_out.rglob("*")) == before


# ---------------------------------------------------------------------- ddpdoctor.capture.window()

MARKED = ROOT / "tests" / "scripts" / "marked_window.py"


def test_window_without_capture_does_nothing_and_says_why():
    from ddpdoctor.capture import window

    with window() as w:
        pass
    assert w.recording is False and w.bundle is None and "no capture" in w.why_not


@pytest.mark.live
@needs_pth
def test_a_window_the_script_marks_is_the_window(tmp_path):
    pytest.importorskip("torch")
    import gzip

    out = tmp_path / "marked"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--rdzv-endpoint=localhost:0",
            "--rdzv-backend=c10d",
            str(MARKED),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=_env(DDPDOCTOR_CAPTURE=str(out), DDPDOCTOR_CAPTURE_ANALYZE="0"),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "rank 0: recording=True" in res.stdout and "rank 1: recording=True" in res.stdout
    for r in (0, 1):
        s = json.loads((out / "ranks" / f"rank{r}" / "settings.json").read_text())
        assert s["steps_completed"] == 12  # training went on after the block
        assert s["window"]["marked_by_script"] and s["window"]["complete"] and s["window"]["recorded_steps"] == 3
        with gzip.open(out / "ranks" / f"rank{r}" / f"rank{r}.pt.trace.json.gz", "rt") as fh:
            names = [e.get("name", "") for e in json.load(fh)["traceEvents"]]
        # the three steps inside the block, numbered as the steps they are; the tail after the last
        # optimizer step (until the block ended) is not a step
        assert sorted(n for n in names if n.startswith("ProfilerStep#")) == [
            "ProfilerStep#6",
            "ProfilerStep#7",
            "ProfilerStep#8",
        ]
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "complete" and m["windows_complete"] and m["ranks_present"] == [0, 1]
    doc = _verdict(out)
    assert sorted(len([t for t in doc["analysis"]["table"] if t["rank"] == r]) for r in (0, 1)) == [3, 3]


@pytest.mark.live
@needs_pth
def test_a_failed_job_under_the_switch_is_diagnosed(tmp_path):
    """examples/oom_skip_batch.py: rank 1 catches an OOM and drifts, rank 0 dies in an all-reduce."""
    pytest.importorskip("torch")
    import time

    out = tmp_path / "oom"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--rdzv-endpoint=localhost:0",
            "--rdzv-backend=c10d",
            str(ROOT / "examples" / "oom_skip_batch.py"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=_env(DDPDOCTOR_CAPTURE=str(out)),
    )
    assert res.returncode != 0
    m = json.loads((out / "manifest.json").read_text())
    said = [ln for ln in res.stderr.splitlines() if "ddpdoctor:" in ln]
    assert m["status"] == "failed" and m["exit_code"] == 1 and m["rank_exit_codes"] == {"0": 1, "1": 0}, (m, said)
    # the last rank's analysis runs in its own session: the launcher ending that rank does not end it
    deadline = time.time() + 120
    while not (out / "report" / "report.md").is_file() and time.time() < deadline:
        time.sleep(1)
    report = json.loads((out / "report" / "report.json").read_text())
    # the finding, not the headline: on a host loaded by other jobs the headline may speak of the noise first
    oom = [f for f in report["findings"] if f["rule"] == "FL001"]
    assert report["verdict"]["failed"] and oom and oom[0]["ranks"] == [1], (report["verdict"], said)
    assert "Rank 1 ran out of CUDA memory" in oom[0]["summary"]
