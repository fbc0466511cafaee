"""Live (real torchrun, gloo, CPU): inside the DataLoader's workers (issue 39, item 1).

- b5_lock_bound_loader: 4 workers per rank read through one handle guarded by a ``multiprocessing.Lock``; the
  workers fetch together but take turns on the lock: DL001 leads with the lock's line in the script, and
  offers no more workers;
- loader_worker_stuck_rank1: rank 1's workers inherit a locked lock and never return a batch; FL005 quotes
  the stuck worker's place (the lock in the script), not only the rank's ``next()``;
- io_wait_loader_workers2: 2 workers each wait ~8 ms per sample on (modelled) remote storage, in parallel: no
  lock, the waits overlap, and the advice stays "more workers".
"""

import pytest
from scenario_run import record_scenario

pytestmark = pytest.mark.live


def _dl001(rep):
    return next((f for f in rep.diagnosis.findings if f.rule == "DL001"), None)


def test_live_workers_queued_on_one_lock_lead_with_the_locks_line(tmp_path):
    res, _out, rep = record_scenario(tmp_path, "b5_lock_bound_loader.py", timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    facts = rep.facts
    assert facts["loader.workers.serialised"] is True, {k: v for k, v in facts.items() if "loader.workers" in k}
    assert facts["loader.workers.lock_place"].endswith("b5_lock_bound_loader.py:66")
    assert facts["loader.workers.lock_code"].startswith("with self.lock:")
    f = _dl001(rep)
    assert rep.diagnosis.verdict.bottleneck == "dataloader" and f is not None
    assert f.fixes[0].title.startswith("The workers take turns on one lock in _read()"), [x.title for x in f.fixes]
    assert "b5_lock_bound_loader.py:66, in _read()" in f.fixes[0].change
    assert not any("worker processes per rank" in x.title for x in f.fixes)


def test_live_workers_waiting_on_storage_in_parallel_still_get_more_workers(tmp_path):
    res, _out, rep = record_scenario(tmp_path, "io_wait_loader_workers2.py", timeout=300, run_opts=("--active", "20"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    facts = rep.facts
    assert facts["loader.workers.serialised"] is False and facts["loader.workers.lock_share"] < 0.1
    assert facts["loader.workers.overlap"] >= 1.5 and facts["loader.workers.wait_share"] >= 0.5
    f = _dl001(rep)
    assert f is not None, [x.rule for x in rep.diagnosis.findings]
    assert "worker processes per rank" in f.fixes[0].title, [x.title for x in f.fixes]


def test_live_a_stuck_worker_is_named_at_the_lock_it_waits_on(tmp_path):
    res, _out, rep = record_scenario(tmp_path, "loader_worker_stuck_rank1.py", timeout=300)
    assert res.returncode != 0
    facts = rep.facts
    assert facts["loader.workers.unfinished.rank"] == 1, {k: v for k, v in facts.items() if "unfinished" in k}
    assert facts["loader.workers.unfinished.place"].endswith("loader_worker_stuck_rank1.py:41")
    assert facts["loader.workers.unfinished.kind"] == "waiting on a lock"
    # (which failure leads, FL005 or FL008 "killed by a signal", is test_mechanism_live's question: torchrun's
    # SIGTERM can reach rank 1 before its hang dump; here FL005 must quote the worker when it fires)
    f = next((x for x in rep.diagnosis.findings if x.rule == "FL005"), None)
    assert f is not None, [(x.rule, x.summary[:120]) for x in rep.diagnosis.findings]
    assert "loader_worker_stuck_rank1.py:41 in record()" in f.summary, f.summary
    assert "`with self.lock:`" in f.fixes[0].change
