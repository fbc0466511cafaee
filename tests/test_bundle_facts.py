"""load_bundle_facts on bundles built in code: names, lowest-rank values, per_rank on
disagreement, several node folders, absent facts stay absent."""

import json
from pathlib import Path

from ddpdoctor.bundle.discover import find_trace_files
from ddpdoctor.bundle.settings import load_bundle_facts


def settings(rank, **over):
    d = {
        "schema": "ddpdoctor.settings/1",
        "rank": rank,
        "local_rank": rank % 2,
        "world_size": 4,
        "hostname": f"node{rank // 2}",
        "nnodes": 2,
        "local_world_size": 2,
        "steps_completed": 10,
        "compiled": False,
        "window": {
            "warmup": 5,
            "active": 5,
            "recorded_steps": 5,
            "first_step": 5,
            "trace": f"rank{rank}.pt.trace.json.gz",
            "complete": True,
        },
        "dataloader": {
            "num_workers": 2,
            "pin_memory": True,
            "batch_size": 32,
            "persistent_workers": False,
            "prefetch_factor": 2,
            "sampler": "DistributedSampler",
            "drop_last": False,
            "dataset_len": 1000,
            "set_epoch_called": True,
        },
        "ddp": {
            "used": True,
            "bucket_cap_mb": 25.0,
            "find_unused_parameters": False,
            "gradient_as_bucket_view": False,
            "static_graph": False,
            "comm_hook": None,
            "param_count": 1000,
            "grad_bytes": 4000,
            "num_buckets": 2,
            "bucket_sizes_bytes": [3000, 1000],
            "unused_parameter_count": 0,
            "broadcast_buffers": True,
            "buffer_bytes": 4096,
        },
        "optimizer": {"type": "AdamW"},
        "precision": {"mixed_precision": "bf16", "tf32": True},
        "memory": {"peak_reserved_bytes": 1000 * (rank + 1), "peak_allocated_bytes": 900, "capacity_bytes": 80_000},
    }
    for k, v in over.items():
        d[k] = v
    return d


def write_node(root: Path, host: str, ranks, status="complete", exit_code=0, per_rank=None):
    (root / "hosts").mkdir(parents=True)
    (root / "manifest.json").write_text(
        json.dumps(
            {
                "schema": "ddpdoctor.manifest/1",
                "status": status,
                "exit_code": exit_code,
                "world_size": 4,
                "ranks_present": list(ranks),
                "step_window": {"warmup": 5, "active": 5},
                "hostname": host,
                "nnodes": 2,
                "command": "torchrun --nnodes=2 train.py --hf-token <redacted>",
            }
        )
    )
    (root / "hosts" / f"{host}.json").write_text(
        json.dumps(
            {
                "schema": "ddpdoctor.host/1",
                "hostname": host,
                "cpu": {"cpu_count": 64},
                "cpus_per_local_rank": 32.0,
                "local_world_size": 2,
                "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85_000_000_000}] * 2,
                "interfaces": [{"name": "eth0"}, {"name": "ib0"}],
                "shm": {"total_bytes": 64 << 30},
                "nvlink": True,
                "ib_devices": ["mlx5_0"],
            }
        )
    )
    for r in ranks:
        d = root / "ranks" / f"rank{r}"
        d.mkdir(parents=True)
        (d / "settings.json").write_text(json.dumps((per_rank or {}).get(r) or settings(r)))


def test_two_node_folders_give_one_flat_dict(tmp_path):
    write_node(tmp_path / "node0", "node0", [0, 1])
    write_node(
        tmp_path / "node1",
        "node1",
        [2, 3],
        per_rank={
            3: settings(
                3,
                dataloader={
                    "num_workers": 0,
                    "pin_memory": True,
                    "batch_size": 32,
                    "persistent_workers": False,
                    "prefetch_factor": None,
                    "sampler": "DistributedSampler",
                    "drop_last": False,
                    "dataset_len": 1000,
                    "set_epoch_called": True,
                },
            )
        },
    )
    f = load_bundle_facts([str(tmp_path / "node0"), str(tmp_path / "node1")])
    assert f["config.dataloader.num_workers"] == 2
    assert f["config.dataloader.num_workers.per_rank"] == {0: 2, 1: 2, 2: 2, 3: 0}
    assert f["config.dataloader.prefetch_factor.per_rank"][3] is None
    assert "config.dataloader.batch_size.per_rank" not in f  # all ranks agree
    assert f["config.ddp.bucket_sizes_bytes"] == [3000, 1000] and f["config.ddp.used"] is True
    assert f["config.ddp.buffer_bytes"] == 4096  # what broadcast_buffers=True sends each forward
    assert f["config.optimizer"] == "AdamW" and f["config.mixed_precision"] == "bf16" and f["config.tf32"] is True
    assert f["memory.peak_bytes"] == 4000 and f["memory.peak_rank"] == 3 and f["memory.capacity_bytes"] == 80_000
    assert f["host.hostnames"] == ["node0", "node1"] and f["host.nnodes"] == 2
    assert f["host.gpu_model"].startswith("NVIDIA H100") and f["host.gpu_count"] == 2 and f["host.nvlink"] is True
    assert f["host.interfaces"] == ["eth0", "ib0"] and f["host.ib_devices"] == ["mlx5_0"]
    assert f["host.cpus_per_local_rank"] == 32.0 and f["host.local_world_size"] == 2 and f["host.cpu_count"] == 64
    assert f["run.status"] == "complete" and f["run.exit_code"] == 0 and f["run.world_size"] == 4
    assert f["run.ranks_present"] == [0, 1, 2, 3] and f["run.captured"] is True
    assert f["run.steps_completed.per_rank"] == {0: 10, 1: 10, 2: 10, 3: 10}
    assert f["run.warmup_steps"] == 5 and f["run.active_steps"] == 5 and "<redacted>" in f["run.command"]
    # the same facts from the parent folder
    assert load_bundle_facts([str(tmp_path)]) == f


def test_a_failed_node_fails_the_run_and_missing_facts_are_absent(tmp_path):
    bare = settings(
        0,
        dataloader=None,
        ddp={"used": False},
        memory=None,
        optimizer=None,
        precision={"mixed_precision": "none", "tf32": None},
    )
    write_node(tmp_path / "a", "a", [0], per_rank={0: bare})
    write_node(tmp_path / "b", "b", [1], status="failed", exit_code=1)
    f = load_bundle_facts([str(tmp_path)])
    assert f["run.status"] == "failed" and f["run.exit_code"] == 1
    assert f["config.ddp.used"] is False
    assert f["config.ddp.used.per_rank"] == {0: False, 1: True}
    assert not any(k.startswith("config.dataloader.") and k.count(".") == 2 and f[k] is None for k in f)
    assert "config.tf32" in f and f["config.tf32"] is True  # only rank 1 recorded it
    assert "config.tf32.per_rank" not in f
    assert f["memory.peak_rank"] == 1


def test_no_bundle_gives_no_facts(tmp_path):
    (tmp_path / "rank0.json").write_text("{}")
    assert load_bundle_facts([str(tmp_path)]) == {}


def test_bundle_json_files_are_not_traces(tmp_path):
    write_node(tmp_path, "h", [0])
    trace = tmp_path / "ranks" / "rank0" / "rank0.pt.trace.json.gz"
    trace.write_bytes(b"")
    assert find_trace_files([str(tmp_path)]) == [trace]


def test_per_task_bundles_that_together_hold_every_rank_are_complete(tmp_path):
    for r in range(4):  # `srun … ddpdoctor run --out run/task$SLURM_PROCID`: each bundle sees 1 of 4 ranks
        write_node(tmp_path / f"task{r}", f"node{r // 2}", [r], status="partial")
        m = json.loads((tmp_path / f"task{r}" / "manifest.json").read_text())
        m.update(windows_complete=True, interrupted_by=None, ranks_present=[r])
        (tmp_path / f"task{r}" / "manifest.json").write_text(json.dumps(m))
    assert load_bundle_facts([str(tmp_path)])["run.status"] == "complete"
    assert load_bundle_facts([str(tmp_path / "task0"), str(tmp_path / "task1")])["run.status"] == "partial"


def test_errors_the_capture_agent_swallowed_become_facts_and_a_warning(tmp_path):
    import json

    from ddpdoctor.bundle.settings import SETTINGS_SCHEMA, load_bundle_facts

    for r, errs in (
        (0, []),
        (1, [{"place": "event log", "type": "OSError", "count": 3, "first_message": "disk full"}]),
    ):
        d = tmp_path / "ranks" / str(r)
        d.mkdir(parents=True)
        (d / "settings.json").write_text(json.dumps({"schema": SETTINGS_SCHEMA, "rank": r, "agent_errors": errs}))
    facts = load_bundle_facts([str(tmp_path)])
    assert facts["capture.agent_errors"] == 3 and facts["capture.agent_error_places"] == ["rank 1: event log"]


def _epoch_batches(tmp_path, name, **dataloader):
    base = settings(0)["dataloader"]
    root = tmp_path / name
    write_node(root, "node0", [0], per_rank={0: settings(0, dataloader={**base, **dataloader})})
    return load_bundle_facts([str(root)]).get("config.dataloader.batches_per_epoch")


def test_batches_per_epoch_recorded_derived_and_observed(tmp_path):
    # recorded len(loader) wins over the derivation
    assert _epoch_batches(tmp_path, "recorded", batches_per_epoch=7) == 7
    # older bundles: 1000 samples sharded over 4 ranks = 250 per rank, 32 per batch: 8 (7 with drop_last)
    assert _epoch_batches(tmp_path, "derived") == 8
    assert _epoch_batches(tmp_path, "derived_drop", drop_last=True) == 7
    assert _epoch_batches(tmp_path, "unsharded", sharded_by=None) == 32  # ceil(1000 / 32)
    assert _epoch_batches(tmp_path, "sharded", sharded_by="DistributedSampler") == 8
    # a loop that leaves each epoch after 3 batches restarts the loader every 3 batches, whatever its length
    assert _epoch_batches(tmp_path, "early_break", batches_per_epoch=5000, iterations=4, batches=12) == 3
    # one pass seen: nothing observed beyond the length
    assert _epoch_batches(tmp_path, "one_pass", batches_per_epoch=5000, iterations=1, batches=40) == 5000
    # no length (an IterableDataset) and no restart seen: unknown, not a guess
    assert _epoch_batches(tmp_path, "iterable", dataset_len=None, batches_per_epoch=None) is None
