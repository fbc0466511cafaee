"""Changes `ddpdoctor run --try KEY=VALUE` applies inside every rank, with the user's script unchanged.

Parsing and validation are plain Python (the CLI imports this module; torch is touched only by the
functions that receive torch objects inside a rank). The keys are the fix knobs the rules use
(``[[fix]] knob = …`` in rules/), so ``--try RULE`` can take a finding's first fix as it is.

Applied at these points: DataLoader and DDP arguments when they are constructed (bound to the real
signature, so positional arguments are changed too), a communication hook right after DDP is built,
``torch.set_num_threads`` there as well, environment variables in the launcher before any rank starts.
"""

from __future__ import annotations

import inspect
import json
import re

ENV_VAR = "DDPDOCTOR_TRY"

# key -> (kind, parse, description)
_BOOL = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


class OverrideError(ValueError):
    """A --try value that cannot be applied; the message is one line for the user."""


def _int(lo: int):
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise OverrideError(f"needs a whole number, got {v!r}") from None
        if n < lo:
            raise OverrideError(f"needs a number >= {lo}, got {n}")
        return n

    return parse


def _float_pos(v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise OverrideError(f"needs a number, got {v!r}") from None
    if not x > 0:
        raise OverrideError(f"needs a number > 0, got {v}")
    return x


def _bool(v: str) -> bool:
    if v.lower() not in _BOOL:
        raise OverrideError(f"needs True or False, got {v!r}")
    return _BOOL[v.lower()]


def _hook(v: str) -> str:
    s = v.strip().lower()
    s = s.removesuffix("_compress_hook")  # the hook's own name, as a rule's fix writes it
    if s in ("fp16", "bf16", "none", "skip"):
        return s
    m = re.fullmatch(r"powersgd(?::(\d+))?", s)
    if m:
        return f"powersgd:{int(m.group(1) or 1)}"
    raise OverrideError(f"takes fp16, bf16, powersgd[:RANK] or skip, got {v!r}")


KNOBS = {
    "dataloader.num_workers": ("dataloader", _int(0), "DataLoader worker processes"),
    "dataloader.pin_memory": ("dataloader", _bool, "pinned host memory for batches"),
    "dataloader.persistent_workers": ("dataloader", _bool, "keep workers alive between epochs"),
    "dataloader.prefetch_factor": ("dataloader", _int(1), "batches prefetched per worker"),
    "ddp.bucket_cap_mb": ("ddp", _float_pos, "gradient bucket size in MB"),
    "ddp.gradient_as_bucket_view": ("ddp", _bool, "gradients as views into the buckets"),
    "ddp.static_graph": ("ddp", _bool, "DDP static graph"),
    "ddp.find_unused_parameters": ("ddp", _bool, "DDP's search for unused parameters"),
    "ddp.comm_hook": (
        "ddp_hook",
        _hook,
        "a communication hook: fp16, bf16, powersgd[:RANK]; skip: none at all "
        "(an ablation that measures what communication costs; the ranks' models drift apart)",
    ),
    "torch.num_threads": ("threads", _int(1), "intra-op threads per rank"),
}
# fix knobs that need a change to the code: refused with the reason
CODE_CHANGES = {
    "train.gradient_accumulation_steps": "accumulation (and no_sync()) changes the training loop itself",
    "dataloader.batch_size": "a different batch changes what one step is; compare samples per second instead",
    "no_sync": "no_sync() is a change to the training loop (wrap the accumulation micro-batches in it)",
    "set_epoch": "sampler.set_epoch(epoch) is a call in the training loop",
    "DistributedSampler": "the sampler is part of the DataLoader the script builds",
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_change(item: str) -> tuple[str, object]:
    """``KEY=VALUE`` -> (key, typed value); OverrideError (one line) otherwise."""
    if "=" not in item:
        raise OverrideError(f"--try {item!r}: expected KEY=VALUE (e.g. dataloader.num_workers=4) or a rule id")
    key, _, raw = item.partition("=")
    key, raw = key.strip(), raw.strip()
    if key.startswith("env."):
        name = key[4:]
        if not _ENV_NAME.fullmatch(name):
            raise OverrideError(f"--try {key}: not an environment variable name")
        return key, raw
    if key in CODE_CHANGES or key.split(".")[-1] in CODE_CHANGES:
        why = CODE_CHANGES.get(key) or CODE_CHANGES[key.split(".")[-1]]
        raise OverrideError(f"--try {key}: needs a change to the code ({why}); not something run can apply")
    if key not in KNOBS:
        raise OverrideError(f"--try {key}: unknown key; known: {', '.join(sorted(KNOBS))}, env.<NAME>")
    try:
        return key, KNOBS[key][1](raw)
    except OverrideError as exc:
        raise OverrideError(f"--try {key}: {exc}") from None


def parse_changes(items: list[str]) -> dict:
    out: dict = {}
    for item in items:
        key, value = parse_change(item)
        if key in out and out[key] != value:
            raise OverrideError(f"--try {key} given twice with different values")
        out[key] = value
    return out


def launcher_env(changes: dict) -> dict[str, str]:
    """Variables the launcher sets for every rank: the changes themselves (read by the agent) and env.*"""
    env = {ENV_VAR: json.dumps(changes, sort_keys=True)}
    for key, value in changes.items():
        if key.startswith("env."):
            env[key[4:]] = str(value)
    if "torch.num_threads" in changes:
        env["OMP_NUM_THREADS"] = str(changes["torch.num_threads"])  # torchrun would set 1 otherwise
    return env


def trial_record(changes: dict | None) -> dict | None:
    """What a rank records of the changes (settings.json's ``trial``): None on a plain run."""
    if changes is None:
        return None
    applied = {k: {"from": None, "to": v} for k, v in changes.items() if k.startswith("env.")}
    return {"changes": changes, "skipped": {}, "applied": applied}


def from_env(environ) -> dict | None:
    raw = environ.get(ENV_VAR)
    if not raw:
        return None
    try:
        d = json.loads(raw)
    except ValueError:
        return None
    return d if isinstance(d, dict) else None


# ------------------------------------------------------------------ inside a rank


def _field(key: str) -> str:
    return key.split(".", 1)[1]


def bind(func, obj, args: tuple, kwargs: dict, changes: dict, prefix: str, record: dict) -> tuple[tuple, dict]:
    """The call's arguments with the ``prefix.*`` changes applied (bound to func's real signature)."""
    wanted = {
        _field(k): v for k, v in changes.items() if k.startswith(prefix + ".") and KNOBS.get(k, ("",))[0] == prefix
    }
    if not wanted:
        return args, kwargs
    sig = inspect.signature(func)
    bound = sig.bind_partial(obj, *args, **kwargs)
    params = sig.parameters
    for name, value in wanted.items():
        key = f"{prefix}.{name}"
        if name not in params:
            record["skipped"][key] = f"{getattr(func, '__qualname__', func)} takes no {name} argument"
            continue
        before = bound.arguments.get(name, params[name].default)
        bound.arguments[name] = value
        record["applied"][key] = {"from": _plain(before), "to": value}
    if prefix == "dataloader":
        _dataloader_consistency(bound, params, record)
    new_args = bound.args[1:]
    return tuple(new_args), dict(bound.kwargs)


def _dataloader_consistency(bound, params, record: dict) -> None:
    """DataLoader refuses prefetch_factor / persistent_workers without workers: drop what cannot apply."""
    workers = bound.arguments.get("num_workers", params["num_workers"].default if "num_workers" in params else 0)
    if workers:
        return
    for name in ("prefetch_factor", "persistent_workers"):
        key = f"dataloader.{name}"
        if key in record["applied"]:
            bound.arguments[name] = record["applied"].pop(key)["from"]
            record["skipped"][key] = "needs num_workers > 0 (the loader runs without workers)"


def _plain(v):
    return v if isinstance(v, (int, float, bool, str, type(None))) else repr(v)[:80]


def _skip_communication(state, bucket):
    """The ablation hook: each rank keeps its own gradients, nothing crosses the network. What the step
    loses with it is what communication costs (exposed transfer and the waits it forces)."""
    import torch  # inside a rank only

    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def after_ddp(ddp, torch, changes: dict, record: dict) -> None:
    """The communication hook and thread count, right after DDP is built."""
    n = changes.get("torch.num_threads")
    if n is not None:
        before = torch.get_num_threads()
        torch.set_num_threads(int(n))
        record["applied"]["torch.num_threads"] = {"from": before, "to": int(n)}
    hook = changes.get("ddp.comm_hook")
    if not hook or hook == "none":
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # inside a rank only

    if hook == "skip":
        ddp.register_comm_hook(None, _skip_communication)
    elif hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    else:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        rank = int(str(hook).split(":")[1])
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
    record["applied"]["ddp.comm_hook"] = {"from": None, "to": hook}
