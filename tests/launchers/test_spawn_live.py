"""Live (CPU, gloo): `ddpdoctor run -- python train.py` where the script starts its own ranks (issue 36).

The PyTorch DDP tutorial's pattern (``torch.multiprocessing.spawn``), ``start_processes`` and a plain
``multiprocessing.Process`` (fork): the script's own process never joins a process group and records
nothing; each child becomes a rank when ``init_process_group`` returns, and records as a torchrun rank does.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from subprocesses import free_port, project_env

from ddpdoctor.capture.host.processes import _pids_of_run

pytest.importorskip("torch")
pytestmark = pytest.mark.live

JOB = Path(__file__).parent / "jobs" / "tutorial_spawn.py"


def _env():
    return project_env()


def _run(tmp_path, *job_args, options=("--no-analyze",), timeout=300):
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--out", str(out), *options, "--"]
    cmd += [sys.executable, str(JOB), "--port", free_port(), *job_args]
    res = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=timeout)
    return res, out


def _settings(out, r):
    return json.loads((out / "ranks" / f"rank{r}" / "settings.json").read_text())


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


def test_spawned_ranks_are_recorded_and_the_slow_function_is_named(tmp_path):
    """The done-when job: rank 1 runs a slow Python function every step -> imbalance on rank 1, named."""
    res, out = _run(tmp_path, "--how", "spawn")
    assert res.returncode == 0, res.stderr[-3000:]
    m = _manifest(out)
    assert m["status"] == "complete" and m["ranks_present"] == [0, 1] and m["world_size"] == 2, m
    assert m["launcher"] == "multiprocessing spawn"
    assert sorted(p.name for p in (out / "ranks").iterdir()) == ["rank0", "rank1"]  # the parent wrote nothing
    s0, s1 = _settings(out, 0), _settings(out, 1)
    assert s0["pid"] != s1["pid"] and s0["process_groups_joined"] == 1 and s0["launcher"] == "multiprocessing spawn"
    # the window aligned across ranks as under torchrun: the same steps, agreed through the group's store
    w0, w1 = s0["window"], s1["window"]
    assert (w0["first_step"], w0["recorded_steps"]) == (w1["first_step"], w1["recorded_steps"]), (w0, w1)
    assert w0["complete"] and w1["active_decided_by"] == "rank 0"
    from ddpdoctor.diagnosis import run_analyze

    rep = run_analyze([str(out)])
    v = rep.diagnosis.verdict
    assert v.bottleneck == "imbalance", (v, [f.rule for f in rep.diagnosis.findings])
    f = next(x for x in rep.diagnosis.findings if x.rule == v.rule)
    assert "Rank 1" in f.summary and "slow_feature_hash" in f.summary, f.summary


@pytest.mark.parametrize(
    ("how", "launcher"), [("start_processes", "multiprocessing spawn"), ("process", "multiprocessing")]
)
def test_ranks_started_by_start_processes_or_a_forked_process(tmp_path, how, launcher):
    res, out = _run(tmp_path, "--how", how, "--steps", "20", "--work", "20000")
    assert res.returncode == 0, res.stderr[-3000:]
    m = _manifest(out)
    assert m["status"] == "complete" and m["ranks_present"] == [0, 1] and m["launcher"] == launcher, m
    assert sorted(p.name for p in (out / "ranks").iterdir()) == ["rank0", "rank1"]
    for r in (0, 1):
        starts = [json.loads(x) for x in (out / "ranks" / f"rank{r}" / "events.jsonl").read_text().splitlines()]
        assert [e["kind"] for e in starts].count("start") == 1
        assert next(e for e in starts if e["kind"] == "joined_process_group")["rank"] == r


def test_the_jobs_exit_code_is_kept(tmp_path):
    res, out = _run(
        tmp_path,
        "--how",
        "process",
        "--steps",
        "8",
        "--work",
        "1000",
        "--exit-code",
        "3",
        options=("--no-analyze", "--keep-going"),
    )
    assert res.returncode == 3, res.stderr[-3000:]
    m = _manifest(out)
    assert m["exit_code"] == 3 and m["status"] == "failed" and m["ranks_present"] == [0, 1], m
    assert _settings(out, 1)["exit"]["code"] == 3 and _settings(out, 0)["exit"]["code"] == 0


def test_ctrl_c_reaches_every_spawned_rank_and_nothing_is_left(tmp_path):
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--out", str(out), "--no-analyze", "--keep-going", "--"]
    cmd += [sys.executable, str(JOB), "--port", free_port(), "--steps", "100000", "--work", "1000", "--hold-s", "0.02"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        evs = [out / "ranks" / f"rank{r}" / "events.jsonl" for r in (0, 1)]
        while time.time() < deadline:
            if all(p.exists() and '"trace"' in p.read_text() for p in evs):
                break
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _o, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "ddpdoctor_capture_agent" not in err, err[-3000:]  # no traceback shows a frame of the agent
    m = _manifest(out)
    assert m["interrupted_by"] == "SIGINT" and m["ranks_present"] == [0, 1], m
    assert _pids_of_run(m["run_id"]) == []  # no process of this run is left
    for r in (0, 1):
        kinds = [json.loads(x)["kind"] for x in evs[r].read_text().splitlines()]
        assert "signal" in kinds and kinds[-1] == "exit", kinds


def test_a_job_whose_processes_never_join_says_so(tmp_path):
    res, out = _run(tmp_path, "--how", "spawn", "--no-join", options=())
    assert res.returncode == 0, res.stderr[-3000:]
    assert "no process joined a process group" in res.stderr, res.stderr[-3000:]
    assert "no training step was seen" not in res.stderr
    assert any(n.startswith("no process joined a process group") for n in _manifest(out)["notes"])


def test_a_second_process_group_keeps_the_first_groups_window(tmp_path):
    res, out = _run(
        tmp_path,
        "--how",
        "spawn",
        "--steps",
        "30",
        "--work",
        "1000",
        "--rejoin-after",
        "20",
        "--port2",
        free_port(),
        options=("--no-analyze", "--keep-going", "--warmup", "2", "--active", "3", "--min-window", "0"),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    for r in (0, 1):
        s = _settings(out, r)
        assert s["process_groups_joined"] == 2 and s["window_process_group"] == 1 and s["window"]["complete"], s
        assert s["window"]["first_step"] == 2
    notes = _manifest(out)["notes"]
    assert (
        "ranks 0, 1 joined a process group again after destroy_process_group: the recorded window belongs to "
        "the first group" in notes
    ), notes


def test_ctrl_c_traceback_shows_the_scripts_frames_only(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text("import time\n\ndef user_loop():\n    while True:\n        sum(range(1000))\n\nuser_loop()\n")
    out = tmp_path / "bundle"
    cmd = [
        sys.executable,
        "-m",
        "ddpdoctor",
        "run",
        "--out",
        str(out),
        "--no-analyze",
        "--",
        sys.executable,
        str(script),
    ]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        events = out / "ranks"
        deadline = time.time() + 60
        while time.time() < deadline and not any(events.glob("*/events.jsonl")):
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _o, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "KeyboardInterrupt" in err and "in user_loop" in err, err[-3000:]
    assert "ddpdoctor_capture_agent" not in err, err[-3000:]
