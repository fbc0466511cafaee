"""The failure timeline `ddpdoctor run` prints: the first problem is the likely cause."""

import json
from pathlib import Path

from ddpdoctor.run_timeline import failure_timeline

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "capture_gloo_2ranks_oom_skip_batch"


def test_the_caught_oom_comes_before_the_collective_error_it_causes():
    lines = failure_timeline([str(SAMPLE)])
    assert len(lines) == 2
    assert "rank 1: out of memory at step 4 (caught by the script" in lines[0]
    assert "rank 0: uncaught RuntimeError at step 9" in lines[1] and "Connection closed" in lines[1]


def _write(tmp_path, rank, events):
    d = tmp_path / "ranks" / f"rank{rank}"
    d.mkdir(parents=True)
    text = "\n".join(json.dumps(e) for e in events) + '\n{"time": 9, "rank'  # a line cut short
    (d / "events.jsonl").write_text(text)


def test_an_uncaught_oom_is_one_line(tmp_path):
    _write(
        tmp_path,
        0,
        [
            {"time": 1.0, "rank": 0, "kind": "step", "step": 0},
            {"time": 2.0, "rank": 0, "kind": "oom", "step": 3, "message": "CUDA out of memory", "caught": None},
            {
                "time": 2.1,
                "rank": 0,
                "kind": "exception",
                "step": 3,
                "type": "torch.OutOfMemoryError",
                "message": "CUDA out of memory",
                "oom": True,
            },
        ],
    )
    _write(tmp_path, 1, [{"time": 3.0, "rank": 1, "kind": "signal", "signal": "SIGTERM", "step": 3}])
    lines = failure_timeline([str(tmp_path)])
    assert len(lines) == 2 and "(uncaught)" in lines[0] and "received SIGTERM" in lines[1]
    assert lines[1].startswith("+  1.00 s")


def test_no_problem_no_lines(tmp_path):
    _write(tmp_path, 0, [{"time": 1.0, "rank": 0, "kind": "exit", "code": 0}])
    assert failure_timeline([str(tmp_path)]) == []
