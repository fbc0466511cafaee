"""A trial prints one line per arm run; a failed arm adds the last lines of its error output."""

from __future__ import annotations

from ddpdoctor.trial import runner
from ddpdoctor.trial.arm_line import arm_line, arm_report, error_tail


def _rec(tmp_path, **kw) -> dict:
    rec = {"arm": "try", "repeat": 2, "bundle": str(tmp_path), "exit_code": 0, "failed": False}
    rec.update(step_times_ms=[40.0, 42.5, 41.0], interrupted_by=None)
    rec.update(kw)
    return rec


def test_one_line_names_arm_repeat_steps_and_median(tmp_path):
    line = arm_line(_rec(tmp_path), "dataloader.num_workers=8")
    assert line == "ddpdoctor: trial try #2 (dataloader.num_workers=8): 3 steps, median step 41.0 ms"
    assert arm_report(_rec(tmp_path, arm="baseline")) == ["ddpdoctor: trial baseline #2: 3 steps, median step 41.0 ms"]
    assert arm_line(_rec(tmp_path, step_times_ms=[7.0]), label="tune: baseline") == (
        "ddpdoctor: tune: baseline: 1 step, median step 7.0 ms"
    )


def test_failed_arm_shows_its_last_error_lines(tmp_path):
    rank0 = tmp_path / "ranks" / "rank0"
    rank0.mkdir(parents=True)
    (rank0 / "output.log").write_text("done: 1 steps\n")
    rank1 = tmp_path / "ranks" / "rank1"
    rank1.mkdir(parents=True)
    body = [f"step {i}" for i in range(10)] + ["Traceback (most recent call last):", "ValueError: bad shape"]
    (rank1 / "output.log").write_text("\n".join(body) + "\n")
    rec = _rec(tmp_path, exit_code=1, failed=True, step_times_ms=[])
    lines = arm_report(rec, "ddp.bucket_cap_mb=2")
    assert lines[0] == "ddpdoctor: trial try #2 (ddp.bucket_cap_mb=2): failed (exit 1); no steps recorded"
    assert lines[-3:-1] == ["  | Traceback (most recent call last):", "  | ValueError: bad shape"]
    assert len(lines) == 1 + 6 + 1 and lines[-1] == f"  (all of it: {rank1 / 'output.log'})"


def test_error_tail_falls_back_to_the_launcher_log_and_drops_profiler_chatter(tmp_path):
    (tmp_path / "launcher.log").write_text(
        "STAGE:2023-02-21 15:15:48 101902:101902 ActivityProfilerController.cpp:294] Completed Stage: Warm Up\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    )
    tail, log = error_tail(tmp_path)
    assert tail == ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"]
    assert log == tmp_path / "launcher.log"
    assert error_tail(tmp_path / "nothing") == ([], None)


def test_interrupted_arm_says_so_without_error_lines(tmp_path):
    lines = arm_report(_rec(tmp_path, interrupted_by="SIGINT", exit_code=130, failed=True))
    assert lines == ["ddpdoctor: trial try #2: interrupted (SIGINT); 3 steps, median step 41.0 ms"]


def test_run_trial_prints_one_line_per_arm_and_keeps_the_job_quiet(tmp_path, monkeypatch):
    seen = []

    def fake_run_capture(opts):
        seen.append(opts.echo)
        return type("R", (), {"exit_code": 0, "status": "complete", "manifest": {}})()

    monkeypatch.setattr(runner, "run_capture", fake_run_capture)
    monkeypatch.setattr(runner, "_diagnose", lambda bundle, opts: None)
    said = []
    opts = runner.TrialOptions(command=["true"], out=tmp_path, changes={"dataloader.num_workers": 2}, repeat=1)
    runner.run_trial(opts, say=said.append)
    assert seen == [False, False]  # the arms' output goes to their bundles only
    assert [s.split(":")[1] for s in said] == [" trial baseline #1", " trial try #1 (dataloader.num_workers=2)"]
