"""The columns of the per-(rank, step) table and what each one means.

All values are microseconds; shares are of the step's own time.  ``None`` means "the
trace cannot show this" (a GPU column on a CPU trace, a cross-rank column with one
rank), never zero.
"""

from __future__ import annotations

COLUMNS: dict[str, str] = {
    "step_time": "duration of the step window (host step span, extended to the GPU work it launched)",
    "dataloader_wait": "time in DataLoader __next__ while the GPU had nothing to do",
    "forward": "host-side span of the model's forward (DDP/FSDP forward annotations)",
    "backward": "host-side span of autograd backward ops",
    "optimizer": "host-side span of Optimizer.step / zero_grad",
    "gpu_busy": "union of all GPU activity (kernels, memcpy, memset)",
    "compute": "union of non-communication kernels (CPU traces: training-thread operator time)",
    "comm": "union of communication kernels (CPU traces: gloo collectives)",
    "comm_exposed": "communication not overlapped by compute (CPU: training thread blocked in a collective)",
    "comm_sync_wait": "time collectives spent waiting for late peers (matched across ranks)",
    "comm_transfer": "time collectives spent transferring (shortest duration across ranks)",
    "memcpy": "memcpy/memset time not overlapped by kernels",
    "host_idle": "GPU idle while the host is busy launching or running CPU ops",
    "other": "the rest of the step: nothing the trace can attribute",
}


# Exclusive columns: on GPU traces they partition step_time exactly.
PARTITION_GPU = ("compute", "comm_exposed", "memcpy", "dataloader_wait", "host_idle", "other")
PARTITION_CPU = ("compute", "comm_exposed", "dataloader_wait", "other")
GPU_ONLY = ("gpu_busy", "memcpy", "host_idle")
CROSS_RANK = ("comm_sync_wait", "comm_transfer")
