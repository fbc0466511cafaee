"""Name-based classification of trace events: phases, DataLoader, collectives.

Kept in one place so that every name pattern ddpdoctor relies on is visible and testable.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache

# Flags for host-side event names.
MARKER, DATALOADER, FORWARD, BACKWARD, OPTIMIZER, COLLECTIVE = 1, 2, 4, 8, 16, 32
RT_ALLOC, RT_SYNC = 64, 128  # runtime calls: device malloc/free, blocking synchronize

# Communication kernels recognized by name.  Vendor libraries: NCCL (ncclKernel_*,
# ncclDevKernel_*), RCCL (same names on ROCm, plus rccl*), DeepEP (dpsk::ep::, deep_ep::),
# NVSHMEM-based kernels, and custom all-reduce kernels that say so in their name.
DEFAULT_COMM_KERNEL_PATTERNS = (
    r"nccl",
    r"rccl",
    r"\bdpsk::ep::",
    r"\bdeep_ep::",
    r"nvshmem",
    r"cross_device_reduce",
    r"custom_?all_?reduce",
    r"\bmscclpp",
)

_FORWARD = re.compile(
    r"^(DistributedDataParallel|DataParallel|FullyShardedDataParallel)\.forward$"
    r"|^##\s*forward\s*##$"
)
_BACKWARD = re.compile(r"^autograd::engine::evaluate_function: |^##\s*backward\s*##$")
_OPTIMIZER = re.compile(r"^Optimizer\.(step|zero_grad)#|^##\s*optimizer\s*##$")

# Host-side collective annotations and ops -> canonical kind (or "" for unknown kind).
_HOST_COLL = re.compile(r"^(nccl|gloo|mpi|ucc|xccl|c10d)(:|::)(?P<op>[A-Za-z_]+?)_?$")

_KIND_WORDS = (
    ("reducescatter", "reduce_scatter"),
    ("reduce_scatter", "reduce_scatter"),
    ("allreduce", "all_reduce"),
    ("all_reduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("all_gather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("all_to_all", "all_to_all"),
    ("sendrecv", "send_recv"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("reduce", "reduce"),
    ("send", "send"),
    ("recv", "recv"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("dispatch", "ep_dispatch"),
    ("combine", "ep_combine"),
)


def comm_kernel_matcher(extra_patterns: tuple[str, ...] = ()):
    pattern = re.compile("|".join(DEFAULT_COMM_KERNEL_PATTERNS + tuple(extra_patterns)), re.IGNORECASE)

    @lru_cache(maxsize=65536)
    def is_comm(name: str) -> bool:
        return pattern.search(name) is not None

    return is_comm


def is_dataloader(name: str) -> bool:
    """The profiler's ``enumerate(DataLoader)#…__next__`` spans (waiting for a batch), and the span
    `ddpdoctor run` puts around ``iter(loader)`` (``enumerate(DataLoader)#DataLoader.__iter__``: a new
    epoch shuts the old workers down and starts new ones)."""
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(("__next__", "__iter__"))) or name.startswith(
        "enumerate(DataPipe)#"
    )


def host_collective_kind(name: str) -> str | None:
    """``nccl:all_reduce`` -> ``all_reduce``; ``None`` when the name is not a collective."""
    if name == "record_param_comms":
        return ""
    m = _HOST_COLL.match(name)
    if not m:
        return None
    return _canonical(m.group("op")) or ""


def library_kinds_from_api(api_names: list[str], library_names: list[str]) -> list[str] | None:
    """Kinds for a backend's own collective events (``gloo:all_reduce``), taken from the
    ``c10d::`` calls that issued them, when the two sequences pair up one to one.  Gloo runs
    ``reduce_scatter_tensor`` (FSDP's gradient reduction) as an all-reduce and records it as
    ``gloo:all_reduce``; the API call (``c10d::_reduce_scatter_base_``) says what it is.  Both
    lists are in time order; the backend runs a group's collectives in the order they were
    issued.  None when the counts differ (some collectives were issued from C++, e.g. by the
    DDP reducer, and the pairing would be a guess)."""
    if not api_names or len(api_names) != len(library_names):
        return None
    kinds = [host_collective_kind(n) or "" for n in api_names]
    if not all(kinds):
        return None
    return kinds


def _canonical(text: str) -> str | None:
    low = text.lower()
    for word, kind in _KIND_WORDS:
        if word in low:
            return kind
    return None


def collective_kind(collective_arg: str | None, kernel_name: str, parent_kind: str | None) -> str:
    """Canonical collective kind of a communication kernel, used to match it across ranks."""
    for source in (collective_arg, parent_kind):
        if source:
            kind = _canonical(source)
            if kind:
                return kind
    # ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_AllGather_RING_LL, dpsk::ep::internode::dispatch<...>
    m = re.match(r"(?:void\s+)?(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", kernel_name)
    base = m.group(1) if m else kernel_name.split("<")[0].split("(")[0]
    kind = _canonical(base)
    if kind and not (m and m.group(1) == "Generic"):
        return kind
    return "comm"


def name_flags(name: str) -> int:
    """Bit set of what a host event's name marks (MARKER, DATALOADER, … RT_SYNC)."""
    f = 0
    if name.startswith("ProfilerStep#") or name.startswith("PyTorch Profiler"):
        f |= MARKER
    if is_dataloader(name):
        f |= DATALOADER
    if _FORWARD.match(name):
        f |= FORWARD
    if _BACKWARD.match(name):
        f |= BACKWARD
    if _OPTIMIZER.match(name):
        f |= OPTIMIZER
    if host_collective_kind(name) is not None:
        f |= COLLECTIVE
    rk = runtime_kind(name)
    if rk:
        f |= RT_ALLOC if rk == "alloc" else RT_SYNC
    return f


def cached_by_name(fn):
    """``fn`` memoized per name for one trace (event names repeat by the thousands)."""
    cache: dict[str, int] = {}

    def get(name: str) -> int:
        v = cache.get(name)
        if v is None:
            v = cache[name] = fn(name)
        return v

    return get


def busiest_thread(starts, ends, tids, pids, ann):
    """(tid, pid) of the CPU thread with the most operator time: the training thread
    when no ``ProfilerStep#`` annotation names it."""
    total: dict = defaultdict(float)
    for s, e, t, p, a in zip(starts, ends, tids, pids, ann):
        if a == 0:
            total[(t, p)] += e - s
    if not total:
        return None, None
    return max(total.items(), key=lambda kv: kv[1])[0]


def step_number(name: str) -> int | None:
    m = re.search(r"#(\d+)$", name)
    return int(m.group(1)) if m else None


# --- runtime calls and kernel-name traits (facts for the rules) --------------------------

_RUNTIME_ALLOC = re.compile(r"^(cuda|hip)(Malloc|Free)")
_RUNTIME_SYNC = re.compile(r"^(cuda|hip)(Device|Stream|Event)Synchronize$")


def runtime_kind(name: str) -> str | None:
    """'alloc' for device allocator calls, 'sync' for blocking synchronizations, else None."""
    if _RUNTIME_ALLOC.match(name):
        return "alloc"
    if _RUNTIME_SYNC.match(name):
        return "sync"
    return None


TRAIT_LOWP, TRAIT_FP8, TRAIT_CONV, TRAIT_NHWC = 1, 2, 4, 8
_LOWP = re.compile(r"bf16|fp16|f16|half|bfloat16|h884|h1688|h16816|hmma", re.I)
_FP8 = re.compile(r"e4m3|e5m2|fp8", re.I)
_CONV = re.compile(r"conv|cudnn|implicit_?gemm|wgrad|dgrad|fprop|miopen", re.I)
_NHWC = re.compile(r"nhwc|channels_?last", re.I)


def kernel_traits(name: str) -> int:
    t = 0
    if _LOWP.search(name):
        t |= TRAIT_LOWP
    if _FP8.search(name):
        t |= TRAIT_FP8
    if _CONV.search(name):
        t |= TRAIT_CONV
    if _NHWC.search(name):
        t |= TRAIT_NHWC
    return t
