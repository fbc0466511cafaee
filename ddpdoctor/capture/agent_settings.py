"""Part of the capture agent (loaded by path beside it): the settings read off the user's
DataLoader, optimizer, DDP model, precision and memory.  torch is passed in, never imported."""

from __future__ import annotations

def _loader_settings(loader) -> dict:
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    try:
        n = len(loader.dataset)
    except Exception:  # noqa: BLE001
        n = None
    bs = loader.batch_size
    if bs is None and batch_sampler is not None:
        bs = getattr(batch_sampler, "batch_size", None)
    drop_last = loader.drop_last
    if batch_sampler is not None and hasattr(batch_sampler, "drop_last"):
        drop_last = batch_sampler.drop_last
    nw = loader.num_workers
    return {
        "num_workers": nw, "pin_memory": bool(loader.pin_memory), "batch_size": bs,
        "persistent_workers": bool(loader.persistent_workers),
        "prefetch_factor": loader.prefetch_factor if nw > 0 else None,
        "sampler": type(sampler).__name__ if sampler is not None else None,
        "batch_sampler": type(batch_sampler).__name__ if batch_sampler is not None else None,
        "drop_last": bool(drop_last), "dataset_len": n, "dataset": type(loader.dataset).__name__,
        "multiprocessing_context": str(getattr(loader, "multiprocessing_context", None) or "") or None,
        "iterable_dataset": any(c.__name__ == "IterableDataset" for c in type(loader.dataset).__mro__),
    }


def _optimizer_settings(opt) -> dict:
    defaults = getattr(opt, "defaults", {}) or {}
    info = {"type": type(opt).__name__, "module": type(opt).__module__,
            "param_groups": len(getattr(opt, "param_groups", []))}
    for k in ("lr", "foreach", "fused", "capturable", "differentiable"):
        if k in defaults:
            v = defaults[k]
            info[k] = v if isinstance(v, (bool, int, float, type(None))) else str(v)
    return info


def _ddp_settings(ddp, torch) -> dict:
    d = {"used": True}
    try:
        log = dict(ddp._get_ddp_logging_data())
    except Exception:  # noqa: BLE001
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
    d["bucket_sizes_source"] = ("ddp logging data (rebuilt buckets)" if rebuilt else "ddp logging data") if bucket_sizes else None
    # unused parameters: trainable parameters without a gradient at the last optimizer step
    unused = sum(1 for p in trainable if p.grad is None)
    d["unused_parameter_count"] = unused
    d["unused_parameter_count_method"] = "trainable parameters whose .grad is None at exit/window end"
    if "unused_parameter_size" in log:
        d["unused_parameter_bytes"] = int(log["unused_parameter_size"])
    d["device_ids"] = [str(x) for x in (getattr(ddp, "device_ids", None) or [])]
    d["module"] = type(ddp.module).__name__
    d["logging_data"] = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in log.items()
                         if k not in ("master_addr", "master_port")}
    return d


def _precision(torch, dtypes, autocast, grad_scaler) -> dict:
    ac = sorted({dt.replace("torch.", "") for _dev, dt in autocast if dt})
    mp = "none"
    if "bfloat16" in ac or ("bfloat16" in dtypes and "float32" not in dtypes):
        mp = "bf16"
    elif "float16" in ac or ("float16" in dtypes and "float32" not in dtypes):
        mp = "fp16"
    out = {"mixed_precision": mp, "autocast": [{"device": dev, "dtype": dt.replace("torch.", "")} for dev, dt in sorted(autocast)],
           "param_dtypes": dtypes, "grad_scaler": grad_scaler, "tf32": None}
    if torch is not None:
        try:
            if torch.cuda.is_available():
                out["tf32"] = bool(torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest")
            out["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        except Exception:  # noqa: BLE001
            pass
    return out


def _memory(torch) -> dict | None:
    if torch is None:
        return None
    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return None
        dev = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(dev)
        out = {"device": dev, "device_name": props.name,
               "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(dev)),
               "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(dev)),
               "capacity_bytes": int(props.total_memory)}
        try:
            stats = torch.cuda.memory_stats(dev)
            out["num_alloc_retries"] = int(stats.get("num_alloc_retries", 0))      # cache flushes: memory pressure
            out["num_ooms"] = int(stats.get("num_ooms", 0))
        except Exception:  # noqa: BLE001
            pass
        return out
    except Exception:  # noqa: BLE001
        return None


def _step_stats(times: list[float]) -> dict | None:
    if not times:
        return None
    t = sorted(times)
    return {"count": len(t), "median": round(t[len(t) // 2], 6), "min": round(t[0], 6), "max": round(t[-1], 6),
            "last": round(times[-1], 6)}


def _nccl_version(torch):
    if torch is None:
        return None
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001
        pass
    return None
