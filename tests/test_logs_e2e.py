"""Real torchrun runs (2 ranks, CPU, gloo) that fail in three ways; the folder of logs they leave
(torchrun's own output + its --log-dir per-rank files) is analyzed: facts and rules name the cause.

The three runs are started together once per module (each takes 5-20 s here)."""

import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.logs import analyze_logs

pytestmark = pytest.mark.live  # every test here reads the logs of real torchrun runs (a module fixture)

SCRIPT = Path(__file__).parent / "scripts" / "failure_toy_train.py"
MODES = ("oom", "stop", "kill")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("failures")
    procs = {}
    for mode in MODES:
        d = root / mode
        d.mkdir()
        out = open(d / "torchrun.out", "w")
        procs[mode] = (
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--nproc_per_node=2",
                    "--rdzv-endpoint=localhost:0",
                    "--rdzv-backend=c10d",
                    "--log-dir",
                    str(d / "logs"),
                    "--redirects",
                    "3",
                    "--tee",
                    "3",
                    str(SCRIPT),
                    mode,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            ),
            out,
        )
    for mode, (p, out) in procs.items():
        try:
            p.wait(timeout=240)
        finally:
            if p.poll() is None:
                p.kill()
            out.close()
        assert p.returncode != 0, f"{mode}: the job was meant to fail"
    return {m: root / m for m in MODES}


def _facts(folder: Path) -> dict:
    a = analyze_logs([str(folder)])
    assert a is not None
    assert a.ranks == [0, 1]
    return a.facts


def _diagnosis(folder: Path):
    from ddpdoctor.diagnosis import run_analyze

    return run_analyze([str(folder)])


def test_oom_rank_is_the_root_cause(runs):
    f = _facts(runs["oom"])
    assert f["failure.oom.ranks"] == [1] and f["failure.oom.tried"] == "2.00 GiB"
    assert f["failure.root_cause.kind"] == "oom" and f["failure.root_cause.rank"] == 1
    # rank 1's steps go to stdout and its OOM traceback to stderr, without timestamps: which step the OOM
    # followed cannot be told (torchrun's console copy interleaves the two streams in no reliable order)
    assert f["failure.root_cause.step"] is None
    assert f["failure.progress.last_step"] == {"0": 4, "1": 5}
    assert f["failure.remote_error.ranks"] == [0]  # rank 0's all-reduce lost its peer
    assert f["failure.symptom_ranks"] == [0]
    assert f["failure.torchrun_named_rank"] == 0 and f["failure.torchrun_misleading"] is True
    rep = _diagnosis(runs["oom"])
    first = rep.diagnosis.findings[0]
    assert first.rule == "FL001" and first.ranks == [1]
    assert "Rank 1 ran out of CUDA memory" in first.summary and "torchrun names rank 0" in first.summary
    assert "FL002" in [x.rule for x in rep.diagnosis.findings]


def test_stopped_rank_and_its_last_step(runs):
    f = _facts(runs["stop"])
    assert f["failure.timeout.ranks"] == [0] and f["failure.timeout.backend"] == "gloo"
    assert f["failure.timeout.timeout_ms"] == 15000
    assert f["failure.stopped.rank"] == 1 and f["failure.stopped.last_step"] == 3
    assert f["failure.root_cause.kind"] == "stopped" and f["failure.root_cause.rank"] == 1
    rep = _diagnosis(runs["stop"])
    first = rep.diagnosis.findings[0]
    assert first.rule == "FL005" and first.ranks == [1]
    assert "Rank 1 stopped issuing collectives after step 3" in first.summary
    assert any("Join" in fx.title for fx in first.fixes)


def test_sigkill_rank_is_named(runs):
    f = _facts(runs["kill"])
    assert f["failure.killed.rank"] == 1 and f["failure.killed.signal"] == "SIGKILL"
    assert f["failure.root_cause.kind"] == "killed" and f["failure.root_cause.rank"] == 1
    assert f["failure.symptom_ranks"] == [0]
    rep = _diagnosis(runs["kill"])
    first = rep.diagnosis.findings[0]
    assert first.rule == "FL008" and first.ranks == [1] and "SIGKILL" in first.summary


def test_cli_on_a_logs_only_folder(runs):
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(runs["kill"])], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 3, res.stderr  # the run failed: FAILED_RUN, not bad input (2)
    assert "FL008" in res.stdout and "killed by SIGKILL" in res.stdout
