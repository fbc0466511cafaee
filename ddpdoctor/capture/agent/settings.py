"""Part of the capture agent: the settings read off the user's
DataLoader, optimizer, DDP model, precision and memory.  torch is passed in, never imported."""

from __future__ import annotations


def _loader_settings(loader) -> dict:
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    try:
        n = len(loader.dataset)
    except Exception:  # no length (an IterableDataset): unknown, not a capture error
        n = None
    bs = loader.batch_size
    if bs is None and batch_sampler is not None:
        bs = getattr(batch_sampler, "batch_size", None)
    drop_last = loader.drop_last
    if batch_sampler is not None and hasattr(batch_sampler, "drop_last"):
        drop_last = batch_sampler.drop_last
    nw = loader.num_workers
    try:
        batches = len(loader)  # batches per epoch on this rank (after the sampler's sharding)
    except Exception:  # no length (an IterableDataset without __len__): unknown, not an error
        batches = None
    sharded_by = _sharded_by(loader, sampler, batch_sampler)
    return {
        "sharded_by": sharded_by,
        "num_workers": nw,
        "pin_memory": bool(loader.pin_memory),
        "batch_size": bs,
        "persistent_workers": bool(loader.persistent_workers),
        "prefetch_factor": loader.prefetch_factor if nw > 0 else None,
        "sampler": type(sampler).__name__ if sampler is not None else None,
        "batch_sampler": type(batch_sampler).__name__ if batch_sampler is not None else None,
        "drop_last": bool(drop_last),
        "dataset_len": n,
        "batches_per_epoch": batches,
        "dataset": type(loader.dataset).__name__,
        "multiprocessing_context": str(getattr(loader, "multiprocessing_context", None) or "") or None,
        "iterable_dataset": any(c.__name__ == "IterableDataset" for c in type(loader.dataset).__mro__),
    }


# class names (anywhere in a loader's sampler / batch sampler / dataset chain, or among their base
# classes) that give each rank its own part of the data, as recorded in data.sharded_by
_SHARDING_CLASSES = (
    "DistributedSampler",
    "DistributedSamplerWrapper",
    "BatchSamplerShard",
    "IterableDatasetShard",
    "SkipBatchSampler",
    "DistributedBatchSampler",
    "ElasticDistributedSampler",
    "DataLoaderDispatcher",
)


def _sharded_by(loader, sampler, batch_sampler) -> str | None:
    """What gives this rank its own part of the data: a distributed sampler (torch's, Lightning's
    wrapper, any subclass), Accelerate's BatchSamplerShard / IterableDatasetShard /
    DataLoaderDispatcher, a Hugging Face dataset split with split_dataset_by_node, or a sampler
    class named for it (…Distributed…, …Shard…).  None when nothing recognisable does."""
    seen, named = [], None
    queue = [sampler, batch_sampler, getattr(loader, "dataset", None)]
    while queue and len(seen) < 12:
        obj = queue.pop(0)
        if obj is None or any(obj is o for o in seen):
            continue
        seen.append(obj)
        name = type(obj).__name__
        if name in _SHARDING_CLASSES or (name.startswith("Distributed") and "Sampler" in name):
            return name
        base = next((c.__name__ for c in type(obj).__mro__[1:] if c.__name__ in _SHARDING_CLASSES), None)
        if base:
            return base
        if named is None and ("Distributed" in name or "Shard" in name):
            named = name
        for attr in ("sampler", "batch_sampler", "dataset", "base_sampler", "_sampler"):
            inner = getattr(obj, attr, None) if not isinstance(obj, (list, tuple, dict)) else None
            if inner is not None and not isinstance(inner, (int, float, str, bool)):
                queue.append(inner)
    for ds in (getattr(loader, "dataset", None), getattr(getattr(loader, "dataset", None), "dataset", None)):
        info = getattr(ds, "_distributed", None)  # datasets.distributed.split_dataset_by_node
        if info is not None and getattr(info, "world_size", 2) > 1:
            return "split_dataset_by_node"
    return named


# where the first optimizer step is called from names the framework driving the loop
_FRAMEWORK_FILES = (
    ("/transformers/trainer", "hf_trainer"),
    ("/lightning/pytorch/", "lightning"),
    ("/pytorch_lightning/", "lightning"),
    ("/lightning/fabric/", "lightning"),
    ("/accelerate/", "accelerate"),
)


def _framework_from_stack(frame) -> str | None:
    found = None
    depth = 0
    while frame is not None and depth < 80:
        name = frame.f_code.co_filename.replace("\\", "/")
        for part, fw in _FRAMEWORK_FILES:
            if part in name:
                if fw != "accelerate":
                    return fw  # HF Trainer and Lightning call through accelerate: they win
                found = found or fw
        frame = frame.f_back
        depth += 1
    return found


def _framework_from_modules(modules, model=None) -> str:
    """Fallback when no optimizer step was seen: the framework modules the program imported
    and the class of the wrapped model."""
    mod = type(model).__module__ if model is not None else ""
    if "transformers.trainer" in modules:
        return "hf_trainer"
    if (
        mod.startswith(("lightning", "pytorch_lightning"))
        or "lightning.pytorch.trainer.trainer" in modules
        or "pytorch_lightning.trainer.trainer" in modules
    ):
        return "lightning"
    if "accelerate.accelerator" in modules:
        return "accelerate"
    return "pytorch"


def _fsdp_settings(kind: str, module, kwargs: dict) -> dict:
    """FSDP settings as passed: FSDP1 (FullyShardedDataParallel) or FSDP2 (fully_shard)."""

    def plain(v):
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        name = getattr(v, "name", None)  # enums: ShardingStrategy.FULL_SHARD -> FULL_SHARD
        if isinstance(name, str) and type(v).__module__.startswith("torch"):
            return name
        fn = getattr(v, "func", v)  # functools.partial(transformer_auto_wrap_policy, ...)
        return getattr(fn, "__qualname__", None) or type(v).__name__

    d = {"kind": kind, "module": type(module).__name__}
    if kind == "fsdp1":
        for k in (
            "sharding_strategy",
            "auto_wrap_policy",
            "backward_prefetch",
            "forward_prefetch",
            "limit_all_gathers",
            "use_orig_params",
            "cpu_offload",
            "mixed_precision",
            "sync_module_states",
        ):
            v = kwargs.get(k, getattr(module, k, None) if k != "auto_wrap_policy" else None)
            d[k] = plain(v)
        strat = getattr(module, "sharding_strategy", None)
        if strat is not None:
            d["sharding_strategy"] = plain(strat)
    else:
        for k in ("reshard_after_forward", "mp_policy", "offload_policy"):
            if k in kwargs:
                d[k] = plain(kwargs[k])
        d.setdefault("reshard_after_forward", True)
        mesh = kwargs.get("mesh")
        d["mesh"] = str(getattr(mesh, "shape", None) or getattr(mesh, "mesh", None)) if mesh is not None else None
    return d


def _accumulation(micro: list, synced: list) -> dict | None:
    """Median forward passes per optimizer step and how many of them synced gradients (the
    first optimizer step is left out: its count includes whatever ran before training)."""
    rows = list(zip(micro, synced))[1:] or list(zip(micro, synced))
    rows = [r for r in rows if r[0] > 0]
    if not rows:
        return None
    m = sorted(r[0] for r in rows)
    sy = sorted(r[1] for r in rows)
    return {
        "micro_batches_per_step": float(m[len(m) // 2]),
        "synced_micro_batches_per_step": float(sy[len(sy) // 2]),
        "optimizer_steps_counted": len(rows),
    }


def _optimizer_settings(opt) -> dict:
    defaults = getattr(opt, "defaults", {}) or {}
    info = {
        "type": type(opt).__name__,
        "module": type(opt).__module__,
        "param_groups": len(getattr(opt, "param_groups", [])),
    }
    for k in ("lr", "foreach", "fused", "capturable", "differentiable"):
        if k in defaults:
            v = defaults[k]
            info[k] = v if isinstance(v, (bool, int, float, type(None))) else str(v)
    return info


def _ddp_settings(ddp, torch, errors=None) -> dict:
    d = {"used": True}
    try:
        log = dict(ddp._get_ddp_logging_data())
    except Exception as exc:
        _count(errors, "ddp logging data", exc)
        log = {}
    cap = getattr(ddp, "bucket_bytes_cap", None)
    d["bucket_cap_mb"] = cap / (1024 * 1024) if cap is not None else None
    for k in ("find_unused_parameters", "gradient_as_bucket_view", "static_graph", "broadcast_buffers"):
        v = getattr(ddp, k, None)
        d[k] = bool(v) if v is not None else (bool(log[k]) if k in log else None)
    hooks = getattr(ddp, "_comm_hooks", None) or []
    hook_name = log.get("comm_hook") or None
    if hooks:
        h = hooks[0][0]
        hook_name = getattr(h, "__qualname__", None) or getattr(h, "__name__", None) or str(h)
    d["comm_hook"] = hook_name or None
    params = [p for p in ddp.module.parameters()]
    trainable = [p for p in params if p.requires_grad]
    d["param_count"] = int(sum(p.numel() for p in params))
    d["param_tensors"] = len(params)
    d["trainable_param_count"] = int(sum(p.numel() for p in trainable))
    d["grad_bytes"] = int(sum(p.numel() * p.element_size() for p in trainable))
    d["param_bytes_by_dtype"] = _bytes_by_dtype(params)
    # what broadcast_buffers=True sends from rank 0 before every forward (DDP's _sync_buffers)
    buffers = list(ddp.module.buffers())
    d["buffer_tensors"] = len(buffers)
    d["buffer_bytes"] = int(sum(b.numel() * b.element_size() for b in buffers))
    rebuilt = log.get("has_rebuilt_buckets") and log.get("rebuilt_bucket_sizes")
    sizes = log.get("rebuilt_bucket_sizes") if rebuilt else log.get("bucket_sizes")
    bucket_sizes = None
    if isinstance(sizes, str) and sizes.strip():
        try:
            bucket_sizes = [int(x) for x in sizes.replace(" ", "").split(",") if x]
        except ValueError:
            bucket_sizes = None
    elif isinstance(sizes, (list, tuple)):
        bucket_sizes = [int(x) for x in sizes]
    d["bucket_sizes_bytes"] = bucket_sizes
    d["num_buckets"] = len(bucket_sizes) if bucket_sizes else None
    d["bucket_sizes_source"] = (
        ("ddp logging data (rebuilt buckets)" if rebuilt else "ddp logging data") if bucket_sizes else None
    )
    # unused parameters: trainable parameters without a gradient at the last optimizer step
    unused = sum(1 for p in trainable if p.grad is None)
    d["unused_parameter_count"] = unused
    d["unused_parameter_count_method"] = "trainable parameters whose .grad is None at exit/window end"
    if "unused_parameter_size" in log:
        d["unused_parameter_bytes"] = int(log["unused_parameter_size"])
    d["device_ids"] = [str(x) for x in (getattr(ddp, "device_ids", None) or [])]
    d["module"] = type(ddp.module).__name__
    d["logging_data"] = {
        k: (v if isinstance(v, (int, float, str, bool)) else str(v))
        for k, v in log.items()
        if k not in ("master_addr", "master_port")
    }
    return d


def _bytes_by_dtype(params) -> dict:
    """Parameter bytes per dtype ("float64": 123456): float64 parameters double the arithmetic and the gradients."""
    out: dict = {}
    for p in params:
        name = str(p.dtype).replace("torch.", "")
        out[name] = out.get(name, 0) + int(p.numel() * p.element_size())
    return out


def _autograd_settings(torch) -> dict:
    """Autograd anomaly mode (torch.autograd.set_detect_anomaly / detect_anomaly), read when the window starts."""
    out = {"anomaly_enabled": bool(torch.is_anomaly_enabled())}
    check_nan = getattr(torch, "is_anomaly_check_nan_enabled", None)
    if callable(check_nan):
        out["anomaly_check_nan"] = bool(check_nan())
    return out


# init_process_group(backend, init_method, timeout, world_size, rank, ...): the positions of the two
_INIT_POSITIONS = {"world_size": 3, "rank": 4}


def _init_call(args, kwargs, env) -> dict:
    """The world_size / rank the script passed to init_process_group (None: not passed, or -1, torch's
    "from the environment"), beside the launcher's WORLD_SIZE / RANK."""
    out: dict = {}
    for name, pos in _INIT_POSITIONS.items():
        v = kwargs.get(name, args[pos] if len(args) > pos else None)
        out[f"{name}_arg"] = v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
        e = env.get(name.upper())
        out[f"env_{name}"] = int(e) if e is not None and e.strip().isdigit() else None
    return out


def _precision(torch, dtypes, autocast, grad_scaler, errors=None) -> dict:
    ac = sorted({dt.replace("torch.", "") for _dev, dt in autocast if dt})
    mp = "none"
    if "bfloat16" in ac or ("bfloat16" in dtypes and "float32" not in dtypes):
        mp = "bf16"
    elif "float16" in ac or ("float16" in dtypes and "float32" not in dtypes):
        mp = "fp16"
    out = {
        "mixed_precision": mp,
        "autocast": [{"device": dev, "dtype": dt.replace("torch.", "")} for dev, dt in sorted(autocast)],
        "param_dtypes": dtypes,
        "grad_scaler": grad_scaler,
        "tf32": None,
    }
    if torch is not None:
        try:
            if torch.cuda.is_available():
                out["tf32"] = bool(
                    torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
                )
            out["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        except Exception as exc:
            _count(errors, "precision settings", exc)
    return out


def _memory(torch, errors=None) -> dict | None:
    if torch is None:
        return None
    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return None
        dev = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(dev)
        out = {
            "device": dev,
            "device_name": props.name,
            "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(dev)),
            "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(dev)),
            "capacity_bytes": int(props.total_memory),
        }
        try:
            stats = torch.cuda.memory_stats(dev)
            out["num_alloc_retries"] = int(stats.get("num_alloc_retries", 0))  # cache flushes: memory pressure
            out["num_ooms"] = int(stats.get("num_ooms", 0))
        except Exception as exc:
            _count(errors, "cuda memory stats", exc)
        return out
    except Exception as exc:
        _count(errors, "cuda memory", exc)
        return None


def _step_stats(times: list[float]) -> dict | None:
    if not times:
        return None
    t = sorted(times)
    return {
        "count": len(t),
        "median": round(t[len(t) // 2], 6),
        "min": round(t[0], 6),
        "max": round(t[-1], 6),
        "last": round(times[-1], 6),
    }


def _nccl_version(torch, errors=None):
    if torch is None:
        return None
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception as exc:
        _count(errors, "nccl version", exc)
    return None


def _count(errors, place: str, exc: Exception) -> None:
    """A reader's failure, counted in the agent's ``agent_errors`` (log.ErrorCounter) when given one."""
    if errors is not None:
        errors.count(place, exc)
