"""Signals read as signals (issue 41, item 10): a rank's negative exit code is a signal; SIGTERM or SIGKILL on every
rank at once is a stop from outside (the launcher killed, a preemption, a time limit), said so — with the sender
when the bundle knows it — and never "find where the script exits with code -15".

The bundles are built as `ddpdoctor run` leaves them (recorded at commit time with `kill -KILL` of the run process
during examples/heavy_compute.py: a manifest with no end time and no exit code, each rank's events.jsonl ending on
`signal SIGTERM` then `exit -15`)."""

import json
import subprocess
from pathlib import Path

import pytest
from subprocesses import run_ddpdoctor


def _bundle(root: Path, codes: dict[int, int], finished: bool) -> Path:
    root.mkdir()
    manifest = {
        "schema": "ddpdoctor.manifest/1",
        "command": "python -m torch.distributed.run --standalone --nproc_per_node=2 train.py",
        "hostname": "vm",
        "start_time": "2026-11-28T04:10:17+00:00",
        "start_unix": 1795839017.5,
        "end_time": "2026-11-28T04:11:00+00:00" if finished else None,
        "status": "failed" if finished else "partial",
        "exit_code": 1 if finished else None,
        "world_size": None,
        "ranks_present": [],
        "run_id": "534a0ce83f714a04a11f20e2bbd52ff5",
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    for rank, code in codes.items():
        d = root / "ranks" / f"rank{rank}"
        d.mkdir(parents=True)
        t = 1795839049.1 + rank / 100
        events = [{"time": t, "rank": rank, "kind": "step", "step": 17, "source": "optimizer", "duration_s": 0.39}]
        if code < 0:
            sig = {-15: "SIGTERM", -9: "SIGKILL"}[code]
            events.append({"time": t + 0.03, "rank": rank, "kind": "signal", "signal": sig, "step": 18})
            reason = f"signal {sig}"
        else:
            reason = "sys.exit" if code else "end"
        events.append(
            {"time": t + 0.04, "rank": rank, "kind": "exit", "code": code, "reason": reason, "steps_completed": 18}
        )
        (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return root


def _analyze(folder: Path) -> subprocess.CompletedProcess:
    return run_ddpdoctor(["analyze", folder, "--hta", "off"], timeout=300, env={"COLUMNS": "200"})


@pytest.mark.parametrize(
    "codes,finished,says,never",
    [
        (
            {0: -15, 1: -15},
            False,
            [
                "The job was stopped from outside: a signal reached every rank at once",
                "Every rank (0, 1) was stopped by SIGTERM at the same time: `ddpdoctor run` itself was killed",
                "Fix first [FL024]: Find what killed `ddpdoctor run`",
            ],
            ["sys.exit(", "Find where the script exits", "code -15"],
        ),
        (
            {0: -15, 1: -15},
            True,
            ["Every rank (0, 1) was stopped by SIGTERM at the same time.", "Find who stopped the job"],
            ["sys.exit(", "Find where the script exits", "`ddpdoctor run` itself was killed"],
        ),
        (
            {0: 0, 1: -15},
            True,
            ["Rank 1 exited with code -15 (SIGTERM)", "Find who sent SIGTERM to rank 1"],
            ["sys.exit(", "Find where the script exits", "stopped from outside"],
        ),
        (
            {0: 3, 1: 3},
            True,
            ["Every rank (0, 1) exited with code 3", "Find where the script exits with code 3"],
            ["stopped from outside", "SIGTERM"],
        ),
    ],
    ids=["run killed", "every rank SIGTERM", "one rank SIGTERM", "the script's own exit 3"],
)
def test_a_signal_is_read_as_a_signal(tmp_path, codes, finished, says, never):
    res = _analyze(_bundle(tmp_path / "bundle", codes, finished))
    assert res.returncode == 3, (res.returncode, res.stdout, res.stderr)
    flat = " ".join(res.stdout.split())
    for s in says:
        assert s in flat, (s, res.stdout)
    for s in never:
        assert s not in flat, (s, res.stdout)
