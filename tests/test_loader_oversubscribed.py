"""The job's own DataLoader workers oversubscribing its CPUs (acc41 cpu_augment_workers_saturated: 2 ranks x 2
workers augmenting images on a 2-CPU host): the CPUs the job wanted (bundle/loader_cpus.py), and the verdict that
follows (rules_engine/eligibility.py, metrics.toml [verdict] own_cpu_saturation), against workers that sleep on
storage (io_wait_loader_workers2), whose advice stays "more workers".  Facts built in code."""

import numpy as np

from ddpdoctor.bundle.loader import loader_facts
from ddpdoctor.bundle.loader_cpus import cpu_demand_facts
from ddpdoctor.expr import Vec
from ddpdoctor.resources import metric_params
from ddpdoctor.rules_engine.registry import load_rules
from ddpdoctor.rules_engine.verdict import diagnose

PARAMS = metric_params()["evidence"]
RANKS = np.array([0, 1])


def _settings(workers_cpu_s, workers_runqueue_s, *, workers=2, wall=0.52, batches=6, process_cpu_s=0.14, host="vm"):
    return {
        "hostname": host,
        "cpu_affinity": [0, 1],
        "loader_window": {
            "schema": 1,
            "wall_s": wall,
            "batches": batches,
            "next_wall_s": 0.1,
            "next_cpu_s": 0.005,
            "next_runqueue_s": 0.01,
            "num_workers": workers,
            "workers_seen": workers,
            "workers_cpu_s": workers_cpu_s,
            "workers_runqueue_s": workers_runqueue_s,
        },
        "evidence": {"contention": {"wall_s": wall, "process_cpu_s": process_cpu_s, "host_cpus": 2}},
    }


def test_cpu_bound_workers_want_more_cpus_than_the_host_has():
    """acc41 idle: each rank's 2 workers used 0.34 / 0.42 s of CPU and waited 0.48 / 0.43 s for one in a
    0.52 s window: 3.2 CPUs wanted by the workers, 3.7 with the training processes, on 2 CPUs."""
    facts = cpu_demand_facts({0: _settings(0.34, 0.48), 1: _settings(0.42, 0.43)})
    assert facts["host.usable_cpus"] == 2
    assert facts["loader.workers_cpus_wanted"] == round((0.34 + 0.48 + 0.42 + 0.43) / 0.52, 3) == 3.212
    assert facts["host.job_cpus_wanted"] == round(3.2115 + 2 * 0.14 / 0.52, 3) == 3.75
    assert facts["loader.workers_runqueue_share"] == round(0.91 / 2.08, 4)
    assert facts["loader.workers_runqueue_share.per_rank"] == {0: 0.4615, 1: 0.4135}


def test_workers_that_sleep_on_storage_want_few_cpus():
    """acc41 io_wait_loader_workers2: workers busy 3-5 % of their time, waiting for a CPU 4-6 %."""
    facts = cpu_demand_facts({0: _settings(0.03, 0.04), 1: _settings(0.04, 0.05)})
    assert facts["loader.workers_cpus_wanted"] < 0.4 and facts["host.job_cpus_wanted"] < 1.0
    assert facts["loader.workers_runqueue_share"] < 0.05


def test_what_cannot_be_measured_gives_no_demand():
    # num_workers=0 (the loading is the training thread's), or no run-queue reading (every worker respawned)
    assert cpu_demand_facts({0: _settings(0.3, 0.2, workers=0), 1: _settings(None, None, workers=0)}) == {}
    assert cpu_demand_facts({0: _settings(0.18, None), 1: _settings(0.2, None)}) == {}
    # a worker that died in the window leaves a negative run-queue difference: no wait, not less than none
    facts = cpu_demand_facts({0: _settings(0.06, -0.13)})
    assert facts["loader.workers_runqueue_share"] == 0.0


def test_the_training_threads_wait_for_a_cpu_outside_next():
    """acc41-style run at 01:07 UTC: the training threads waited 0.20 / 0.30 s for a CPU in windows of 0.69 / 0.73 s,
    0.014 / 0.033 s of it inside next(loader) (the DataLoader wait's own)."""
    a, b = _settings(0.41, 0.75, wall=0.69), _settings(0.28, 1.09, wall=0.73)
    a["loader_window"].update(train_runqueue_s=0.1966, next_runqueue_s=0.0139)
    b["loader_window"].update(train_runqueue_s=0.2987, next_runqueue_s=0.0333)
    facts = cpu_demand_facts({0: a, 1: b})
    per = {0: round((0.1966 - 0.0139) / 0.69, 4), 1: round((0.2987 - 0.0333) / 0.73, 4)}
    assert facts["train.runqueue_share.per_rank"] == per
    assert facts["train.runqueue_share"] == round((per[0] + per[1]) / 2, 4)
    # recorded without workers too (it is the training thread's), absent where the window stopped elsewhere
    solo = _settings(None, None, workers=0)
    solo["loader_window"].update(train_runqueue_s=0.05, next_runqueue_s=0.0)
    assert cpu_demand_facts({0: solo}) == {"train.runqueue_share": round(0.05 / 0.52, 4)}
    assert "train.runqueue_share" not in cpu_demand_facts({0: _settings(0.3, 0.4)})


def test_the_host_whose_job_wants_most_cpus_speaks():
    ranks = {
        0: _settings(0.1, 0.0, host="a"),
        1: _settings(0.1, 0.0, host="a"),
        2: _settings(0.5, 0.5, host="b"),
        3: _settings(0.6, 0.5, host="b"),
    }
    facts = cpu_demand_facts(ranks)
    assert facts["loader.workers_cpus_wanted.per_rank"] == {2: 1.923, 3: 2.115}
    assert facts["host.job_cpus_wanted"] == round((2.1 + 2 * 0.14) / 0.52, 3)


def test_batches_in_flight_at_the_window_edges_are_no_costlier_loading():
    """acc41 busy: rank 1's workers used 0.43 s for 5 batches, rank 0's 0.32 s (1.34x): with 2 workers part-way
    through a batch at each edge, 5 batches resolve the CPU per batch to 40 %; over 20 batches 2x stands out."""
    ranks = {0: _settings(0.32, 0.57, wall=0.84, batches=5), 1: _settings(0.43, 1.03, wall=0.82, batches=5)}
    assert "loader.costlier.rank" not in loader_facts(ranks, PARAMS)
    ranks = {0: _settings(0.32, 0.2, wall=1.6, batches=20), 1: _settings(0.64, 0.2, wall=1.6, batches=20)}
    assert loader_facts(ranks, PARAMS)["loader.costlier.rank"] == 1


def _run(**over) -> dict:
    """acc41 idle cpu_augment_workers_saturated, as the analysis sees it: rank 0 waits 19 % of its step for its
    workers, rank 1 6 %; gloo's all-reduce of 22 KB exposed 24 % of the step on both; rank 1 late by 33 % in 4 of
    6 steps, 2 ms of it untraced, the rest unattributed; the workers CPU-bound (70 %), 3.8 CPUs wanted on 2,
    44 % of their time in the run queue."""
    facts = {
        "trace.present": True,
        "run.device": "cpu",
        "run.backend": "gloo",
        "run.ranks": [0, 1],
        "run.ranks_analyzed": 2,
        "run.world_size": 2,
        "run.steps": 6,
        "rank.share.dataloader_wait": Vec(np.array([0.19, 0.062]), RANKS),
        "rank.dataloader_wait": Vec(np.array([16530.0, 5361.0]), RANKS),
        "rank.share.comm_transfer_exposed": Vec(np.array([0.24, 0.24]), RANKS),
        "rank.share.compute": Vec(np.array([0.45, 0.40]), RANKS),
        "straggler.count": 1,
        "straggler.ranks": [1],
        "straggler.rank": 1,
        "straggler.late_us": 28380.0,
        "straggler.late_share": 0.33,
        "straggler.steps_late": 4,
        "straggler.steps": 6,
        "straggler.extra_column": "other",
        "straggler.extra_us": 2057.0,
        "cross.input_shapes": "constant",
        "host.local_world_size": 2,
        "host.cpus_per_local_rank": 1.0,
        "host.contention.cpus_per_rank": 1.0,
        "host.contention.threads_per_cpu": 1.0,
        "host.contention.other_busy_share": 0.0,
        "config.dataloader.num_workers": 2,
        "config.dataloader.persistent_workers": True,
        "loader.cpu_share": 0.7033,
        "loader.cpu_ms_per_batch": 70.0,
        "loader.cpu_ms_per_batch.per_rank": {0: 56.7, 1: 70.0},
        "loader.compute_ms_per_batch": 69.8,
        "loader.batch_latency_ms": 172.8,
        "loader.workers_needed": 3,
        "host.job_cpus_wanted": 3.775,
        "host.usable_cpus": 2,
        "loader.workers_cpus_wanted": 3.238,
        "loader.workers_runqueue_share": 0.4415,
    }
    facts.update(over)
    return facts


def _cost(d, category):
    return next(c for c in d.costs if c.category == category)


def test_an_oversubscribing_loader_is_the_bottleneck_not_the_starved_collectives():
    d = diagnose(_run(), load_rules())
    assert d.verdict.bottleneck == "dataloader" and d.verdict.rule == "DL001", d.verdict.summary
    dl = next(f for f in d.findings if f.rule == "DL001")
    assert dl.fixes[0].title.endswith("make each batch cheaper to load, not more workers")
    assert not any("worker processes per rank" in fx.title for fx in dl.fixes)
    comm = _cost(d, "communication")
    assert not comm.eligible and "gloo's collectives run on the CPUs" in comm.why_not
    late = _cost(d, "imbalance")
    assert not late.eligible and "late in the CPU load of the job's own DataLoader workers" in late.why_not


def test_workers_that_wait_on_storage_change_nothing():
    """The same run with workers that sleep (CPU share 4 %, 5 % in the run queue, 0.9 CPUs wanted): the
    loader neither oversubscribes nor starves anything; the exposed all-reduce decides, as before."""
    waiting = {
        "loader.cpu_share": 0.04,
        "loader.workers_runqueue_share": 0.05,
        "host.job_cpus_wanted": 0.94,
        "loader.workers_cpus_wanted": 0.37,
    }
    d = diagnose(_run(**waiting), load_rules())
    assert d.verdict.bottleneck == "communication", d.verdict.summary
    dl = next(f for f in d.findings if f.rule == "DL001")
    assert dl.evidence["cpus_oversubscribed"] is False
    assert "not more workers" not in dl.fixes[0].title
    # ... and so does a job whose CPUs were not measured (an older bundle, plain traces)
    unmeasured = {k: v for k, v in _run().items() if k not in ("host.job_cpus_wanted", "host.usable_cpus")}
    assert diagnose(unmeasured, load_rules()).verdict.bottleneck == "communication"


def test_collectives_that_need_no_cpu_of_theirs_stay_a_cost():
    d = diagnose(_run(**{"run.backend": "nccl"}), load_rules())
    assert _cost(d, "communication").eligible
    assert d.verdict.bottleneck == "communication"


def test_a_late_rank_with_a_cause_of_its_own_keeps_its_finding():
    """Rank 1's GIL-holding call accounts for its lateness: its own, oversubscribed CPUs or not."""
    own = {"python.gil_held.rank": 1, "python.gil_held.ms_per_step": 25.0, "python.gil_held.share": 0.29}
    d = diagnose(_run(**own), load_rules())
    assert _cost(d, "imbalance").eligible and d.verdict.bottleneck == "imbalance", d.verdict.summary


def test_on_a_contended_host_the_loaders_wait_on_one_rank_is_still_the_loaders():
    """acc41 busy: other processes took 36 % of the CPUs (IM004), rank 1 waited 36 % of its step for its workers
    in 2 of its 5 steps, rank 0 1 %, rank 1 late by 56 % in its DataLoader wait. Without the oversubscription
    such a wait on one rank is set aside as machine noise; with it, it is the loader's cost."""
    steps = Vec(np.array([0.01, 0.01, 0.02, 0.0, 0.01, 0.05, 0.6, 0.02, 0.7, 0.05]), np.repeat(RANKS, 5))
    busy = {
        "host.contention.other_busy_share": 0.36,
        "rank.share.dataloader_wait": Vec(np.array([0.011, 0.362]), RANKS),
        "rank.dataloader_wait": Vec(np.array([1887.0, 59740.0]), RANKS),
        "step.share.dataloader_wait": steps,
        "rank.share.comm_transfer_exposed": Vec(np.array([0.135, 0.164]), RANKS),
        "straggler.late_us": 82200.0,
        "straggler.late_share": 0.557,
        "straggler.steps_late": 5,
        "straggler.steps": 5,
        "straggler.extra_column": "dataloader_wait",
        "straggler.extra_us": 57850.0,
        "loader.cpu_share": 0.69,
        "host.job_cpus_wanted": 3.22,
        "loader.workers_cpus_wanted": 2.84,
        "loader.workers_runqueue_share": 0.48,
    }
    d = diagnose(_run(**busy), load_rules())
    # two stalls in five steps: the job's per-step wait is 14.7 % ± 14.8 % against DL001's 10 %, within the
    # step-to-step noise of its threshold (issue 41's edge), so the verdict names it at its line rather than
    # deciding on it; what this test guards is that the wait is the loader's, not set aside as machine noise
    dl = _cost(d, "dataloader")
    assert (dl.eligible or dl.at_line) and "machine noise" not in (dl.why_not or ""), dl
    assert d.verdict.bottleneck == "dataloader" or "dataloader at the 10 % line" in (d.verdict.label or ""), d.verdict
    assert not _cost(d, "imbalance").eligible
    quiet = diagnose(_run(**{**busy, "loader.workers_runqueue_share": 0.05}), load_rules())
    assert not _cost(quiet, "dataloader").eligible and "machine noise" in _cost(quiet, "dataloader").why_not


def test_the_loop_starved_of_cpu_by_its_workers_is_the_loaders_cost_when_its_wait_is_small():
    """The same job recorded at 01:07 UTC: the loop waited 4 % of its step in next(), but its training threads waited
    for a CPU 31 % of the window; the workers wanted 3.6 of the 3.9 + 0.7 (others') CPUs wanted: 24 % of the step
    is the workers' doing. Workers that sleep on storage take no CPU from the loop: nothing is added."""
    starved = {
        "rank.share.dataloader_wait": Vec(np.array([0.035, 0.053]), RANKS),
        "rank.dataloader_wait": Vec(np.array([4100.0, 6300.0]), RANKS),
        "rank.share.comm_transfer_exposed": Vec(np.array([0.34, 0.34]), RANKS),
        "train.runqueue_share": 0.3147,
        "host.job_cpus_wanted": 3.916,
        "loader.workers_cpus_wanted": 3.561,
        "loader.workers_runqueue_share": 0.6484,
        "host.contention.other_busy_share": 0.3358,
    }
    d = diagnose(_run(**starved), load_rules())
    dl = next(f for f in d.findings if f.rule == "DL001")
    part = 0.3147 * 3.561 / (3.916 + 0.3358 * 2)
    assert abs(dl.cost - (0.044 + part)) < 1e-3 and dl.ranks == [0, 1]
    assert d.verdict.bottleneck == "dataloader", d.verdict.summary
    assert "The training threads waited for a CPU 31 % of the window" in dl.summary
    waiting = {**starved, "loader.cpu_share": 0.04, "loader.workers_runqueue_share": 0.05}
    assert not any(f.rule == "DL001" for f in diagnose(_run(**waiting), load_rules()).findings)
