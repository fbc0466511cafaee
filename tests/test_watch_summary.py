"""`ddpdoctor analyze DIR` on a `run --watch` folder (ddpdoctor/watch_summary.py), on folders built in code."""

import json

import pytest
from subprocesses import run_ddpdoctor

from ddpdoctor.watch_summary import cells, render_watch, sparkline, watch_folder_of


def _folder(tmp_path, incidents=(), contention=None, not_recorded=()):
    for r in (0, 1):
        d = tmp_path / "ranks" / f"rank{r}"
        d.mkdir(parents=True)
        rows = [{"step": i, "wall_s": 0.015 if i < 100 else 0.045} for i in range(200)]
        (d / "watch-steps.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    w = {
        "schema": "ddpdoctor.watch/1",
        "incidents": list(incidents),
        "not_recorded": list(not_recorded),
        "steps_seen": {"0": 200, "1": 200},
        "contention": contention or {},
        "baseline": {},
        "overhead": {"per_step_s": 3.5e-05, "share_of_step": 0.0027},
    }
    (tmp_path / "watch.json").write_text(json.dumps(w))
    return tmp_path


def test_a_healthy_run_in_one_screen(tmp_path):
    text = render_watch(_folder(tmp_path))
    assert "Watched run: 2 ranks, 200 steps each" in text
    assert "Healthy throughout: no incident in 200 steps." in text
    assert "0.27 % of step time" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("  rank 0"))
    assert line.count("█") >= 20 and "▃" in line  # the second half three times the first


def test_contention_and_an_unrecorded_alarm_are_said(tmp_path):
    episode = {"step": 175, "ratio": 1.6, "extra_ms": 10.3, "run_queue_extra_ms": 7.4}
    waited = {"step": 175, "ratio": 1.5, "extra_ms": 9.0, "run_queue_extra_ms": None}
    late = {"kind": "slowdown", "step": 260, "raised_by_rank": 0, "why": "steps 2x"}
    text = render_watch(_folder(tmp_path, contention={"1": [episode], "0": [waited]}, not_recorded=[late]))
    assert "Host contention on rank 1 from about step 175: steps 1.6x, 7.4 of 10.3 ms" in text
    assert "rank 0 from" not in text  # the rank that only waited for rank 1 is not a second episode
    assert "Raised but not recorded: slowdown for step 260" in text


def test_an_incident_without_its_folder_says_so(tmp_path):
    inc = {"n": 1, "step": 120, "onset_step": 100, "kind": "slowdown", "ranks": [], "path": "incidents/001-x"}
    text = render_watch(_folder(tmp_path, incidents=[inc]))
    assert "Healthy until step 100 (then slowdown; recorded at step 120)." in text
    assert "no bundle was written at" in text


def test_only_a_single_watch_folder_is_summarized(tmp_path):
    folder = _folder(tmp_path / "w")
    assert watch_folder_of([str(folder)]) == str(folder)
    assert watch_folder_of([str(folder), str(folder)]) is None
    assert watch_folder_of([str(tmp_path)]) is None


def test_sparkline_scales_to_the_top():
    assert sparkline(cells([(i, 1.0) for i in range(10)], columns=5), 1.0) == "█████"
    assert sparkline([], 1.0) == ""


def test_analyze_cli_prints_the_watch_screen(tmp_path):
    res = run_ddpdoctor(["analyze", str(_folder(tmp_path))], timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Healthy throughout" in res.stdout


@pytest.mark.live  # (`ddpdoctor run` counts as a launch for the guard; it is refused before anything starts)
def test_watch_and_try_are_refused_in_one_line(tmp_path):
    args = ["run", "--watch", "--try", "dataloader.num_workers=2", "--", "python", "x.py"]
    res = run_ddpdoctor(args, timeout=120, cwd=tmp_path)
    assert res.returncode == 2
    assert "--watch and --try do not go together" in res.stderr
    assert "Traceback" not in res.stderr
