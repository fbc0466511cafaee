"""What explains a late rank (issue 25, acc30's cpu_augment_workers_saturated, io_wait_loader_workers2,
thread_oversubscription, gil_held_pickle_rank0): with DataLoader workers, the training thread's time in
the DataLoader's iterator is its wait for the workers, not work of its own; and a cause explains the
lateness only when its excess per step accounts for enough of it.  Facts built in code."""

import numpy as np

from ddpdoctor.bundle.evidence import python_facts
from ddpdoctor.expr import Vec
from ddpdoctor.resources import metric_params
from ddpdoctor.rules_engine.registry import load_rules
from ddpdoctor.rules_engine.verdict import diagnose

PARAMS = metric_params()["evidence"]
NEXT = "torch.utils.data.dataloader._BaseDataLoaderIter.__next__ in main (train.py:95)"


def _rank(next_ms: float, workers: int) -> dict:
    fns = [
        {"func": "main", "file": "train.py", "where": NEXT, "ms_per_step": next_ms},
        {"func": "forward", "file": "train.py", "where": "forward (train.py:20)", "ms_per_step": 30.0},
    ]
    return {
        "dataloader": {"num_workers": workers},
        "evidence": {
            "stacks": {
                "sampled": True,
                "samples": 100,
                "ms_per_sample": 10.0,
                "step_ms": 200.0,
                "steps": 5,
                "functions": fns,
            }
        },
    }


def test_waiting_for_workers_is_not_extra_work():
    facts = python_facts({0: _rank(5.0, 2), 1: _rank(150.0, 2)}, PARAMS)
    assert "python.extra_work.rank" not in facts
    # without workers the loading runs in that call: a rank that spends longer there does more of it
    facts = python_facts({0: _rank(5.0, 0), 1: _rank(150.0, 0)}, PARAMS)
    assert facts["python.extra_work.rank"] == 1


def _late_in_loader(**over) -> dict:
    """Rank 1 late by 73 % of the step, its extra time in its DataLoader wait (54 % of its step; rank 0's 2 %,
    rank 0 waits in the all-reduce); exposed transfer 25 % on both; no other process measured."""
    ranks = np.array([0, 1])
    facts = {
        "trace.present": True,
        "run.device": "cpu",
        "run.ranks": [0, 1],
        "run.ranks_analyzed": 2,
        "run.world_size": 2,
        "run.steps": 5,
        "rank.share.compute": Vec(np.array([0.36, 0.32]), ranks),
        "rank.share.dataloader_wait": Vec(np.array([0.02, 0.54]), ranks),
        "rank.share.comm_transfer_exposed": Vec(np.array([0.25, 0.25]), ranks),
        "straggler.count": 1,
        "straggler.ranks": [1],
        "straggler.rank": 1,
        "straggler.late_us": 266000.0,
        "straggler.late_share": 0.73,
        "straggler.steps_late": 5,
        "straggler.steps": 5,
        "straggler.extra_column": "dataloader_wait",
        "straggler.extra_us": 157000.0,
        "cross.imbalance_score": 0.16,
        "cross.input_shapes": "constant",
        "host.contention.other_busy_share": 0.0,
        "host.contention.cpus_per_rank": 1.0,
        "host.contention.threads_per_cpu": 1.0,
        "config.dataloader.num_workers": 2,
    }
    facts.update(over)
    return facts


def test_a_cause_explains_the_late_rank_only_when_it_accounts_for_its_lateness():
    """acc30 busy thread_oversubscription: 8 intra-op threads per CPU beside a burner; the sampler starved
    twice on rank 0 (16 ms per step put on a GIL-holding backward) while rank 0 was 36 ms late: that gap
    does not explain the lateness, which is the contended host's (IM004 measured it)."""
    rules = load_rules()
    facts = _late_in_loader(
        **{
            "rank.share.dataloader_wait": Vec(np.array([0.0, 0.0]), np.array([0, 1])),
            "rank.share.compute": Vec(np.array([0.85, 0.71]), np.array([0, 1])),
            "rank.share.comm_transfer_exposed": Vec(np.array([0.02, 0.03]), np.array([0, 1])),
            "straggler.ranks": [0],
            "straggler.rank": 0,
            "straggler.late_us": 36200.0,
            "straggler.late_share": 0.15,
            "straggler.steps_late": 4,
            "straggler.extra_column": "compute",
            "straggler.extra_us": 38200.0,
            "host.contention.other_busy_share": 0.35,
            "python.gil_held.rank": 0,
            "python.gil_held.ms_per_step": 16.3,
            "python.gil_held.share": 0.064,
            "python.gil_held.where": "torch.Tensor.backward in main (train.py:55)",
        }
    )
    d = diagnose(facts, rules)
    im = next(c for c in d.costs if c.category == "imbalance" and c.cost == 0.15)
    assert not im.eligible and "machine noise" in im.why_not, d.verdict.summary
    # a GIL-holding call that stops the rank for most of its lateness is its cause
    d = diagnose({**facts, "python.gil_held.ms_per_step": 30.0, "python.gil_held.share": 0.12}, rules)
    assert next(c for c in d.costs if c.category == "imbalance" and c.cost == 0.15).eligible
    # ... and so do two causes that name it, together (the sampler's gaps and its samples do not overlap)
    d = diagnose(
        {
            **facts,
            "python.extra_work.rank": 0,
            "python.extra_work.ms_per_step": 10.0,
            "python.extra_work.share": 0.04,
            "python.extra_work.where": "snapshot (train.py:34)",
        },
        rules,
    )
    assert next(c for c in d.costs if c.category == "imbalance" and c.cost == 0.15).eligible


def _window(next_wall_s: float, next_cpu_s: float, workers: int = 0, workers_cpu_s=None, batches: int = 5) -> dict:
    return {
        "schema": 1,
        "wall_s": 0.16,
        "batches": batches,
        "next_wall_s": next_wall_s,
        "next_cpu_s": next_cpu_s,
        "next_runqueue_s": 0.003,
        "workers_runqueue_s": None,
        "num_workers": workers,
        "workers_seen": workers,
        "workers_cpu_s": workers_cpu_s,
    }


def test_a_rank_whose_batches_cost_more_to_load_is_named():
    """acc40 per_rank_file_shards_unequal (num_workers=0): rank 1 parses 2x the CSV rows per batch, 24.2 ms
    of CPU per batch against rank 0's 15.5 ms; cpu_augment_workers_saturated: both ranks' workers used 0.28 s."""
    from ddpdoctor.bundle.loader import loader_facts

    facts = loader_facts(
        {0: {"loader_window": _window(0.080, 0.0774)}, 1: {"loader_window": _window(0.124, 0.1208)}}, PARAMS
    )
    assert facts["loader.costlier.rank"] == 1 and facts["loader.costlier.ratio"] == 1.561
    assert facts["loader.costlier.ms_per_step"] == 8.68 and facts["loader.costlier.others_ms_per_batch"] == 15.48
    same = _window(0.08, 0.004, workers=2, workers_cpu_s=0.28)
    facts = loader_facts({0: {"loader_window": same}, 1: {"loader_window": dict(same, next_wall_s=0.028)}}, PARAMS)
    assert "loader.costlier.rank" not in facts and facts["loader.cpu_ms_per_batch"] == 56.0
    # two /proc ticks per worker is the workers' resolution: 0.02 s against 0.01 s over 5 batches is not a difference
    facts = loader_facts(
        {0: {"loader_window": dict(same, workers_cpu_s=0.02)}, 1: {"loader_window": dict(same, workers_cpu_s=0.01)}},
        PARAMS,
    )
    assert "loader.costlier.rank" not in facts


def test_late_in_the_loader_every_rank_pays_is_the_loaders_cost():
    """acc40 cpu_augment_workers_saturated, idle host: rank 0 waits 19 % for its workers, rank 1 7 %
    (under DL001's bar), the same loading CPU per batch on both: the late rank is late in the loader's
    cost, so the loader decides the verdict; with rank 0's batches costlier, its lateness is its own."""
    rules = load_rules()
    ranks = np.array([0, 1])
    facts = _late_in_loader(
        **{
            "rank.share.dataloader_wait": Vec(np.array([0.188, 0.065]), ranks),
            "rank.share.compute": Vec(np.array([0.70, 0.70]), ranks),
            "rank.share.comm_transfer_exposed": Vec(np.array([0.01, 0.15]), ranks),
            "straggler.ranks": [0],
            "straggler.rank": 0,
            "straggler.late_us": 10800.0,
            "straggler.late_share": 0.13,
            "straggler.extra_us": 10300.0,
            "loader.cpu_share": 0.9,
            "loader.cpu_ms_per_batch": 56.0,
        }
    )
    d = diagnose(facts, rules)
    assert d.verdict.bottleneck == "dataloader", d.verdict.summary
    im = next(c for c in d.costs if c.category == "imbalance")
    assert not im.eligible and "every rank pays" in im.why_not and "machine noise" not in im.why_not
    costlier = {"loader.costlier.rank": 0, "loader.costlier.ms_per_step": 9.0, "loader.costlier.ratio": 1.5,
                "loader.costlier.cpu_ms_per_batch": 84.0, "loader.costlier.others_ms_per_batch": 56.0}  # fmt: skip
    d = diagnose({**facts, **costlier}, rules)
    assert d.verdict.bottleneck == "imbalance", d.verdict.summary
    im = next(f for f in d.findings if f.rule.startswith("IM"))
    assert "1.5x the other ranks' CPU to load" in im.summary
    # acc40 uneven_seq_lengths: rank 1's batches cost 2.1x to load (1.4 ms against 0.6 ms) but its 112 ms of
    # lateness is compute: the loading is not what the fix names
    d = diagnose({**facts, **costlier, "straggler.extra_column": "compute", "cross.input_shapes": "varying"}, rules)
    im = next(f for f in d.findings if f.rule.startswith("IM"))
    assert "CPU to load" not in im.summary and "CPU to load" not in im.fixes[0].title
