"""`ddpdoctor run --watch` end to end (issue 38) on a 2-rank CPU/gloo job (tests/scripts/watch_train.py, steps of
~10-20 ms): a problem that starts late gives one incident whose bundle is diagnosed; a hang gives every rank's
stacks before the process group's timeout; a healthy job, even beside a CPU burner, gives none."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from subprocesses import ROOT, project_env

SCRIPT = ROOT / "tests" / "scripts" / "watch_train.py"
TORCHRUN2 = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]

pytestmark = pytest.mark.live


def _watch_cmd(out: Path, *script_args: str) -> list[str]:
    ddpdoctor = [sys.executable, "-m", "ddpdoctor", "run", "--watch", "--out", str(out), "--"]
    return [*ddpdoctor, sys.executable, *TORCHRUN2, str(SCRIPT), *script_args]


def _run(out: Path, *script_args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        _watch_cmd(out, *script_args), env=project_env(), capture_output=True, text=True, timeout=timeout
    )


def _watch_json(out: Path) -> dict:
    return json.loads((out / "watch.json").read_text())


def test_late_expensive_function_on_rank_1_gives_one_imbalance_incident_naming_it(tmp_path):
    out = tmp_path / "w"
    res = _run(out, "--steps", "380", "--late-from", "100", "--late-rank", "1", "--late-ms", "40")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "done: 380 steps" in res.stdout  # the job ran to its own end
    w = _watch_json(out)
    assert w["schema"] == "ddpdoctor.watch/1"
    assert w["steps_seen"] == {"0": 380, "1": 380}
    assert len(w["incidents"]) == 1, w["incidents"]
    inc = w["incidents"][0]
    assert inc["kind"] in ("slowdown", "straggler") and inc["step"] >= 95 and inc["ranks"] == [0, 1]
    assert 95 <= inc["onset_step"] <= 110, inc  # the change began at step 100
    from ddpdoctor import analyze

    doc = analyze(str(out / inc["path"]))
    assert doc.verdict.bottleneck == "imbalance", doc.verdict
    first = doc.findings[0]
    assert first.ranks == [1]
    assert "expensive_feature_hash" in first.fixes[0].title
    assert "expensive_feature_hash" in res.stdout  # the one-screen summary says it too
    assert "Healthy until step" in res.stdout
    assert not (out / "ranks" / "rank0" / "rank0.pt.trace.json.gz").exists()  # no start-up window


def test_hang_is_recorded_before_the_process_group_timeout_with_the_barrier_line(tmp_path):
    out = tmp_path / "h"
    barrier_line = next(
        i for i, ln in enumerate(SCRIPT.read_text().splitlines(), 1) if "the barrier rank 1 never reaches" in ln
    )
    proc = subprocess.Popen(
        _watch_cmd(out, "--steps", "300", "--hang-at", "120", "--timeout-s", "60"),
        env=project_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    inc_ranks = None
    deadline = time.time() + 120
    try:
        while time.time() < deadline and proc.poll() is None:
            found = sorted((out / "incidents").glob("*-hang/ranks/rank*/stacks.txt")) if out.is_dir() else []
            if len(found) == 2:
                inc_ranks = found
                break
            time.sleep(0.5)
        time.sleep(1.0)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C once the evidence is in: the test need not wait 60 s
        stdout, stderr = proc.communicate(timeout=60)
    assert inc_ranks is not None, stderr[-3000:]
    trigger = json.loads(next((out / "watch").glob("trigger-*.json")).read_text())
    assert trigger["kind"] == "hang" and trigger["step"] == 120
    # written before the 60 s timeout: the hang began at rank 0's last step
    events = [json.loads(ln) for ln in (out / "ranks" / "rank0" / "events.jsonl").read_text().splitlines()]
    last_step = max(e["time"] for e in events if e["kind"] == "step")
    stacks_written = max(p.stat().st_mtime for p in inc_ranks)
    assert stacks_written - last_step < 60 * 0.5, stacks_written - last_step
    rank0 = (out / "incidents" / "001-step120-hang" / "ranks" / "rank0" / "stacks.txt").read_text()
    assert f'watch_train.py", line {barrier_line} in main' in rank0
    rank1 = (out / "incidents" / "001-step120-hang" / "ranks" / "rank1" / "stacks.txt").read_text()
    assert "stuck_in_preprocessing" in rank1
    assert proc.returncode != 0
    time.sleep(2)  # nothing of the job is left running after Ctrl-C
    left = subprocess.run(["pgrep", "-f", str(SCRIPT) + " --steps 300 --hang-at"], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout
    w = _watch_json(out)
    assert [i["kind"] for i in w["incidents"]] == ["hang"]
    summary = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(out)], env=project_env(), capture_output=True, text=True
    )
    assert f"watch_train.py:{barrier_line}" in summary.stdout or f"line {barrier_line} in main" in summary.stdout


def _burner() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


@pytest.mark.parametrize("burner", [False, True], ids=["idle", "beside-a-cpu-burner"])
def test_healthy_job_gives_no_incident(tmp_path, burner):
    out = tmp_path / "ok"
    hog = _burner() if burner else None
    try:
        res = _run(out, "--steps", "300")
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    assert res.returncode == 0, res.stderr[-3000:]
    w = _watch_json(out)
    assert w["incidents"] == [], w["incidents"]
    assert w["not_recorded"] == [], w["not_recorded"]  # none raised in the last steps either
    assert w["steps_seen"] == {"0": 300, "1": 300}
    assert all(b and b["median_s"] > 0 for b in w["baseline"].values())
    assert not (out / "incidents").exists()
    assert "Healthy throughout" in res.stdout


def test_a_rank_that_raises_gives_one_failure_incident_whose_verdict_names_it(tmp_path):
    out = tmp_path / "f"
    res = _run(out, "--steps", "300", "--fail-at", "150", "--timeout-s", "30")
    assert res.returncode != 0  # the job's own failure, untouched
    w = _watch_json(out)
    assert [(i["kind"], i["step"], i["raised_by_rank"]) for i in w["incidents"]] == [("failure", 150, 1)]
    inc = w["incidents"][0]
    assert inc["ranks"] == [0, 1]  # rank 0, which died of it, joined the same incident
    # (its exception as the agent's event recorded it: the traceback reaches output.log after the agent's exit hook)
    rank1 = out / inc["path"] / "ranks" / "rank1"
    assert "labels out of range" in (rank1 / "events.jsonl").read_text()
    assert "Rank 1 raised RuntimeError: bad batch" in res.stdout
