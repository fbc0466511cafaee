"""What a rank writes into its bundle folder, declared once for the writer and the reader.

The writer is the agent (``recorder.py`` writes ``settings.json``, ``log.py`` writes ``events.jsonl``);
the reader is the analysis (``ddpdoctor/bundle/settings.py`` and ``bundle/events.py``).  This module
imports nothing, so the agent loads it by path inside the user's interpreter and the analysis imports it
as ``ddpdoctor.capture.agent.contract``.  tests/capture/test_contract.py fails when the writer writes a
field that is not declared here, when a declared field is never written, or when the reader reads one
that is not declared.

Adding a hook that records something new: one row in ``patches.PATCHES`` (what to wrap and which agent
method it calls), one field here (``SETTINGS_FIELDS`` and, for a record the reader reads key by key,
``SETTINGS_RECORDS``), and one fact in ``rules/facts.toml`` for the value the reader derives from it
(docs/DESIGN.md, "Capture: the agent and its contract", walks through an example).
"""

SETTINGS_SCHEMA = "ddpdoctor.settings/1"
MANIFEST_SCHEMA = "ddpdoctor.manifest/1"  # manifest.json (written by host/manifest.py or host/env_records.py)
HOST_SCHEMA = "ddpdoctor.host/1"  # hosts/<host>.json (host/hostinfo.py)
SETTINGS_FILE = "settings.json"  # ranks/rank<R>/settings.json
EVENTS_FILE = "events.jsonl"  # ranks/rank<R>/events.jsonl: one JSON object per line

# settings.json: every top-level field the agent writes -> what it holds
SETTINGS_FIELDS = {
    "schema": "SETTINGS_SCHEMA",
    "rank": "the global rank",
    "local_rank": "the rank on its host",
    "world_size": "ranks in the job",
    "local_world_size": "ranks on this host (LOCAL_WORLD_SIZE)",
    "node_rank": "GROUP_RANK",
    "nnodes": "GROUP_WORLD_SIZE",
    "hostname": "the host",
    "pid": "the rank's process id",
    "launcher": "the launcher that started the rank: torchrun, multiprocessing spawn, multiprocessing, ignite, ray, "
    "slurm, mpirun, accelerate, lightning or plain",
    "process_groups_joined": "init_process_group calls that returned (0: the process never joined one)",
    "window_process_group": "which of those groups (1-based) the window started in; null: before any, or no window",
    "python": "the Python version",
    "cpu_affinity": "CPUs the rank may run on",
    "torch_version": "torch.__version__",
    "nccl_version": "NCCL's version as torch reports it",
    "steps_completed": "training steps counted",
    "step_source": "what counted them: optimizer or ddp_forward",
    "window": "the profiled window (keys in SETTINGS_RECORDS)",
    "exit": "the exit code and why",
    "exceptions": "uncaught exceptions seen",
    "ooms": "out-of-memory errors seen",
    "user_profiler": "the script ran its own torch.profiler",
    "step_time_s": "step time statistics",
    "compiled": "torch.compile was used",
    "dataloader": "the main DataLoader's settings",
    "dataloaders": "every DataLoader's settings",
    "optimizer": "the first optimizer that stepped",
    "framework": "the training loop's framework",
    "train": "micro-batches per optimizer step",
    "fsdp": "the outermost FSDP wrap's settings",
    "ddp": "the DDP model's settings",
    "distributed": "the process group",
    "precision": "dtypes, autocast, GradScaler, TF32",
    "memory": "the device's peak memory",
    "autograd": "autograd anomaly mode when the window started",
    "init_process_group": "the world_size / rank the script passed to init_process_group, and the launcher's",
    "evidence": "window evidence, its own schema (bundle/evidence.py reads it)",
    "compile": "torch.compile compilations in the window (bundle/compile.py reads it)",
    "loader_window": "the DataLoader's wait and its workers' CPU (bundle/loader.py reads it)",
    "agent_errors": "capture problems the agent caught and went on from",
    "trial": "`run --try`: the changes applied in this rank (a trial's arms only)",
    "settings_note": "why values are cached ones (written from the signal watcher only)",
}
# written only in some runs
OPTIONAL_SETTINGS_FIELDS = ("trial", "settings_note")

# the records whose keys the reader reads by name: field -> the keys the agent may write
SETTINGS_RECORDS = {
    "window": (
        "warmup",
        "active",
        "requested_active",
        "active_decided_by",
        "cut_by_script_end",
        "recorded_steps",
        "first_step",
        "trace",
        "complete",
        "marked_by_script",
        # issue 37: what decided the window's start (capture/agent/window.StepWindow.steady)
        "steady",
    ),
    "exit": ("code", "reason"),
    "dataloader": (
        "sharded_by",
        "num_workers",
        "pin_memory",
        "batch_size",
        "persistent_workers",
        "prefetch_factor",
        "sampler",
        "batch_sampler",
        "drop_last",
        "dataset_len",
        "batches_per_epoch",
        "dataset",
        "multiprocessing_context",
        "iterable_dataset",
        "iterations",
        "batches",
        "returned",
        "set_epoch_called",
        "batch_fingerprints",
        "samples_per_epoch",
        "dataset_fingerprint",
    ),
    "ddp": (
        "used",
        "bucket_cap_mb",
        "find_unused_parameters",
        "gradient_as_bucket_view",
        "static_graph",
        "broadcast_buffers",
        "comm_hook",
        "param_count",
        "param_tensors",
        "trainable_param_count",
        "grad_bytes",
        "buffer_tensors",
        "buffer_bytes",
        "bucket_sizes_bytes",
        "num_buckets",
        "bucket_sizes_source",
        "unused_parameter_count",
        "unused_parameter_count_method",
        "unused_parameter_bytes",
        "device_ids",
        "module",
        "logging_data",
        "param_bytes_by_dtype",
        "float64_slowdown",
    ),
    "optimizer": ("type", "module", "param_groups", "lr", "foreach", "fused", "capturable", "differentiable"),
    "train": ("micro_batches_per_step", "synced_micro_batches_per_step", "optimizer_steps_counted"),
    "fsdp": (
        "kind",
        "module",
        "sharding_strategy",
        "auto_wrap_policy",
        "backward_prefetch",
        "forward_prefetch",
        "limit_all_gathers",
        "use_orig_params",
        "cpu_offload",
        "mixed_precision",
        "sync_module_states",
        "reshard_after_forward",
        "mp_policy",
        "offload_policy",
        "mesh",
        "wrapped_modules",
    ),
    "precision": ("mixed_precision", "autocast", "param_dtypes", "grad_scaler", "tf32", "float32_matmul_precision"),
    "memory": (
        "device",
        "device_name",
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "capacity_bytes",
        "num_alloc_retries",
        "num_ooms",
    ),
    "distributed": ("backend", "world_size", "rank"),
    "autograd": (
        "anomaly_enabled",
        "anomaly_check_nan",
        "anomaly_us_per_node",
        "anomaly_timed_frames",
        "graph_nodes_per_forward",
        "graph_frames_per_forward",
    ),
    "init_process_group": ("world_size_arg", "rank_arg", "env_world_size", "env_rank"),
    "step_time_s": ("count", "median", "min", "max", "last"),
}

# events.jsonl: every event kind the agent writes -> when.  Each line also has time, rank and pid.
EVENT_KINDS = {
    "start": "the agent became active in this rank",
    "step": "a training step ended",
    "step_source": "steps are counted at DDP forward calls (no optimizer step seen)",
    "ddp": "the DDP model was built",
    "init_process_group": "the script called init_process_group (the world_size / rank it passed)",
    "joined_process_group": "init_process_group returned: the rank, the world size, the launcher recognised",
    "process_group_again": "the script joined a process group again (after destroy_process_group)",
    "rank_differs": "the process group's rank is not the one the launcher's variables gave",
    "fsdp": "the first FSDP wrap",
    "profiler_start": "the window's profiler started",
    "trace": "the window's trace was written",
    "user_profiler": "the script runs its own torch.profiler",
    "window_marked_by_script": "ddpdoctor.capture.window() is in use",
    "window_mark_ignored": "a window() block after this rank's one window",
    "oom": "an out-of-memory error was raised (caught or not)",
    "exception": "an uncaught exception (any thread)",
    "signal": "a signal reached the rank",
    "stop": "the agent ends training after the window",
    "stop_wait": "waiting for the other ranks to finish the window",
    "left_process_group": "the rank left its group",
    "stuck_after_peer_stop": "stuck in a collective after peers stopped",
    "forced_exit": "ended by ddpdoctor",
    "hang_request": "a stuck rank asked for stack dumps",
    "hang_signal_ready": "the hang dump handler is armed",
    "hang_dump": "a stack dump was written",
    "hang_over": "the stuck rank moved again",
    "watch_trigger": "run --watch: this rank raised or saw an incident's trigger (n, incident kind, step S, why)",
    "watch_recording": "run --watch: this rank started recording an incident's window (n, step, steps)",
    "watch_contention": "run --watch: a slowdown that run-queue wait explains (other processes took the cores): no incident",
    "watch_incident_skipped": "run --watch: an incident's window could not be recorded on this rank (why)",
    "ddpdoctor_error": "a capture problem the agent went on from",
    "exit": "the rank's exit",
}
# the kinds that are problems of the run, shown in time order (the first is the likely root cause)
PROBLEM_KINDS = ("oom", "exception", "signal", "stuck_after_peer_stop", "forced_exit", "user_profiler")


def undeclared_settings(data: dict) -> list[str]:
    """Fields and record keys of one settings.json that this contract does not declare ("ddp.x")."""
    out = [k for k in data if k not in SETTINGS_FIELDS]
    for field, keys in SETTINGS_RECORDS.items():
        record = data.get(field)
        if isinstance(record, dict):
            out += [f"{field}.{k}" for k in record if k not in keys]
    return out
