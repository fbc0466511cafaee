"""Live (real torchrun, gloo, CPU): two failures whose mechanism the bundle alone tells.

- a rank deadlocked on its own non-reentrant Lock is blocked, not busy: the hang dump records the line it
  stands on and its main thread's CPU time (none), and the answer is the stopped-rank rule with the lock fix;
- an all-reduce under ``if rank == 0:`` meets the peer's DDP gradient all-reduce: gloo aborts on a size
  mismatch, and the answer is the collective mismatch by call site, not the padding fix.
"""

import json

import pytest
from scenario_run import record_scenario

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")


def _run(tmp_path, script):
    res, out, rep = record_scenario(tmp_path, script, timeout=240)
    assert res.returncode != 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert rep.facts["run.status"] == "failed" and rep.diagnosis.findings
    return out, rep, rep.diagnosis.findings[0]


def test_live_a_rank_deadlocked_on_its_own_lock_is_blocked(tmp_path):
    out, rep, first = _run(tmp_path, "log_rotation_deadlock_rank1.py")
    f = rep.facts
    dump = json.loads((out / "ranks" / "rank1" / "hang_dump.jsonl").read_text())
    stuck = max(dump["states"], key=lambda s: s["last_seen"] - s["first_seen"])
    assert stuck["stack"][-1]["code"] == "with self.lock:"
    if "cpu_s" in stuck:  # Linux/macOS: the main thread's CPU clock
        assert stuck["cpu_s"] < 0.5 * (stuck["last_seen"] - stuck["first_seen"])
    assert f["failure.hang.busy_rank"] is None and f["failure.hang.blocked_rank"] == 1
    assert first.rule == "FL005" and first.ranks == [1]
    assert "It was blocked, not computing" in first.summary and "(`with self.lock:`)" in first.summary
    assert "threading.RLock" in first.fixes[0].title
    assert not any(x.rule == "FL014" for x in rep.diagnosis.findings)


def test_live_an_all_reduce_on_rank_0_only_is_a_call_site_mismatch(tmp_path):
    _out, rep, first = _run(tmp_path, "allreduce_only_on_rank0_logging.py")
    f = rep.facts
    assert f["failure.root_cause.kind"] == "op_mismatch" and first.rule == "FL021"
    assert f["failure.bundle.own_collective_rank"] == 0
    assert "DDP gradient all-reduce (in backward) at allreduce_only_on_rank0_logging.py:" in first.summary
    assert "Call rank 0's own collective on every rank" in first.fixes[0].title
    assert not any("different sizes" in x.title for x in first.fixes)
