"""Part of the capture agent (standard library only): a process becomes a rank when it joins a process group.

Launchers start ranks in many ways: torchrun and Slurm and MPI set rank variables before the interpreter
starts; ``torch.multiprocessing.spawn`` (the DDP tutorial), PyTorch-Ignite's ``idist.Parallel`` and
``multiprocessing.Process`` pass the rank as an argument; Ray Train sets RANK in a worker that was started
long before.  The one call every DDP rank makes is ``init_process_group`` (``init_device_mesh`` calls it).
So a process that is not known as a rank at start-up (``process.activation``: ON_JOIN) watches that one
call, nothing else (a ``Pending``); when it returns, the process group tells the rank and the world size,
and the agent starts in that process as it starts in a torchrun rank at start-up.  A process that never
joins (the parent of spawn, DataLoader workers, Ray's own processes) never writes anything.

``launcher_of`` names the launcher the joined rank was started by, for the manifest and the card.
"""

from __future__ import annotations

import os
import sys

from . import patches as _patches

C10D = "torch.distributed.distributed_c10d"
# the one patch of a process that is not (yet) a rank
JOIN_PATCHES = (_patches.Patch(C10D, "init_process_group", after="process_group_joined"),)

LAUNCHERS = (
    "torchrun",
    "multiprocessing spawn",
    "multiprocessing",
    "ignite",
    "ray",
    "slurm",
    "mpirun",
    "accelerate",
    "lightning",
    "plain",
)


class Pending:
    """A process under capture that is not a rank (yet).  ``become_rank(args, kwargs)`` starts the agent in
    it and returns it (None: this process does not record, e.g. a bundle folder that belongs to another run);
    later joins (a re-init after ``destroy_process_group``) go to that agent."""

    def __init__(self, become_rank, loader_worker_args=None):
        self.become_rank = become_rank
        self.loader_worker_args = loader_worker_args  # a DataLoader worker's probe (loader_workers.py), or None
        self.agent = None
        self.tried = False
        self.errors: list[str] = []  # before an agent exists, there is no event log to write them to

    def process_group_joined(self, result, *args, **kwargs) -> None:
        if self.agent is not None:
            self.agent.process_group_joined(result, *args, **kwargs)
            return
        if self.tried:
            return
        self.tried = True
        agent = self.become_rank(args, kwargs)
        if agent is None:
            return
        self.agent = agent
        agent.settings.init_called(*args, **kwargs)  # the call that made it a rank, as the patch records it
        agent.process_group_joined(result, *args, **kwargs)

    def internal_error(self, place: str, exc: BaseException) -> None:
        if self.agent is not None:
            self.agent.internal_error(place, exc)
            return
        if len(self.errors) < 20:
            self.errors.append(f"{place}: {type(exc).__name__}: {exc}")
        if self.tried and len(self.errors) == 1:  # joining failed: this rank is not recorded, said once
            try:
                sys.stderr.write(f"ddpdoctor: capture disabled in pid {os.getpid()}: {self.errors[0]}\n")
            except Exception:
                pass


def watch(pending: Pending) -> None:
    """Watch ``init_process_group`` in this process (now, or when torch.distributed is imported)."""
    _patches.install(pending, JOIN_PATCHES)


def group_identity(torch, env) -> tuple[int, int, int]:
    """(rank, world size, local rank) of the default process group just joined.  The local rank: the
    launcher's variable, else the rank among the group's ranks on this host when the group tells it, else
    the global rank (one host: spawn's ranks)."""
    dist = torch.distributed
    rank, world = dist.get_rank(), dist.get_world_size()
    for name in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"):
        try:
            return rank, world, int(env[name])
        except (KeyError, ValueError):
            continue
    return rank, world, rank


def rank_env(env, rank: int, world: int, local: int) -> dict:
    """The environment the agent reads for a rank that joined: the job's own, with the group's identity
    where no launcher variable gave it (the process's own ``os.environ`` is left as it is)."""
    out = dict(env)
    out.setdefault("RANK", str(rank))
    out.setdefault("WORLD_SIZE", str(world))
    out.setdefault("LOCAL_RANK", str(local))
    if out.get("RANK") != str(rank):  # a launcher variable that disagrees with the group: the group wins
        out["RANK"], out["WORLD_SIZE"] = str(rank), str(world)
    return out


def launcher_of(env, argv: list[str], modules, spawned: bool, forked: bool) -> str:
    """Which launcher started this rank (one of ``LAUNCHERS``)."""
    joined = " ".join(argv)
    # Ray first: Ray Train sets ACCELERATE_TORCH_DEVICE in its workers (ray/train/torch/config.py)
    if "ray.train" in modules or "ray/_private/workers" in joined or "default_worker.py" in joined:
        return "ray"
    if any(k.startswith("ACCELERATE_") for k in env):
        return "accelerate"
    if env.get("TORCHELASTIC_RUN_ID"):
        return "torchrun"
    if "SLURM_PROCID" in env:
        return "slurm"
    if any(k in env for k in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")):
        return "mpirun"
    if spawned:
        return "ignite" if "ignite.distributed" in modules else "multiprocessing spawn"
    if forked:
        return "ignite" if "ignite.distributed" in modules else "multiprocessing"
    if "lightning" in modules or "pytorch_lightning" in modules or "lightning_fabric" in modules:
        return "lightning"
    return "plain"
