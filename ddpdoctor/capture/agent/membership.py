"""Part of the capture agent (standard library only): this rank's process group.

- ``joined``: ``init_process_group`` returned.  The group's rank and world size are the rank's identity
  from now on; a provisional process (the command's own Python process, recorded aside in
  ``ranks/.process-<pid>``) takes its rank's folder; a second group (a re-init after
  ``destroy_process_group``) is recorded, and the window stays the one already counted.
- ``end_provisional``: the command's own process ends without having joined a group.  It was the job's one
  rank (a single-process script: ``ranks/rank0``) unless other processes joined one (spawn's parent): then
  it recorded nothing and its folder goes.
- ``after_fork_in_child``: a forked child (``multiprocessing.Process``, a fork-start DataLoader worker) is
  not this rank; its inherited hooks wait, in a ``join.Pending``, for it to join a group of its own.
"""

from __future__ import annotations

import os
import shutil
import sys

from . import join as _join
from . import loader_workers as _loader_workers
from . import patches as _patches
from . import process as _process


class Membership:
    def __init__(self, agent, join_as_rank):
        self.agent = agent
        self.join_as_rank = join_as_rank  # core.join_as_rank: a forked child that joins becomes a rank with it

    def joined(self, _result, *args, **kwargs) -> None:
        a = self.agent
        a.joins += 1
        torch = a.torch or sys.modules.get("torch")
        rank, world, local = _join.group_identity(torch, a.env)
        if a.joins > 1:
            a.event(
                "process_group_again",
                step=a.steps,
                rank=rank,
                world_size=world,
                joins=a.joins,
                window_process_group=a.window_group,
                message="the script joined a process group again after destroy_process_group; steps count on, "
                "one window per rank",
            )
            return
        if a.provisional:
            self.settle(rank, local)
        elif rank != a.rank:
            a.event("rank_differs", step=a.steps, launcher_rank=a.rank, group_rank=rank)
        a.world_size = world
        if a.launcher is None:
            a.launcher = self.launcher_name()
        a.event("joined_process_group", step=a.steps, rank=rank, world_size=world, launcher=a.launcher)

    def launcher_name(self) -> str:
        """The launcher that started this rank: recognised when it joined, else from its start-up."""
        if self.agent.launcher is not None:
            return self.agent.launcher
        return _join.launcher_of(os.environ, _process.process_argv(), sys.modules, False, False)

    def settle(self, rank: int, local: int) -> None:
        """The provisional process joined as ``rank``: its folder becomes ranks/rank<rank>."""
        a = self.agent
        target = os.path.join(a.bundle, "ranks", f"rank{rank}")
        try:
            os.rename(a.dir, target)
        except OSError as exc:  # the folder is taken: keep recording aside, said in the errors
            a.internal_error(f"taking {target}", exc)
            return
        old, a.dir, a.provisional = a.dir, target, False
        a.rank = a.log.rank = rank
        a.local_rank = local
        a.profiler.trace_name = f"rank{rank}.pt.trace.json.gz"
        os.environ["DDPDOCTOR_ACTIVE_RANK"] = str(rank)
        if a.ending.hang is not None:
            a.ending.hang.out_path = os.path.join(target, "hang_dump.jsonl")
        if a.evidence._work_dir == old:
            a.evidence._work_dir = target
        if os.environ.get("NCCL_DEBUG_FILE") == os.path.join(old, "nccl.log"):
            os.environ["NCCL_DEBUG_FILE"] = os.path.join(target, "nccl.log")

    def end_provisional(self) -> None:
        a = self.agent
        ranks = os.path.join(a.bundle, "ranks")
        try:
            others = [d for d in os.listdir(ranks) if d.startswith("rank") and d[4:].isdigit()]
        except OSError:
            others = []
        if others:
            shutil.rmtree(a.dir, ignore_errors=True)
            return
        with a.errors.quiet("provisional folder"):
            os.rename(a.dir, os.path.join(ranks, "rank0"))
            a.dir, a.provisional = os.path.join(ranks, "rank0"), False

    def end_with_forked_child(self) -> None:
        """A child forked by multiprocessing ends with ``os._exit`` after its target returns: atexit never runs
        there.  Its exit is taken where multiprocessing ends it (``util._exit_function``, still inside the
        target's ``finally``, so the exception or ``SystemExit`` that ends the child is at hand)."""
        import multiprocessing.util as mp_util

        mp_util.Finalize(None, self._forked_child_ends, exitpriority=100)

    def _forked_child_ends(self) -> None:
        a, life = self.agent, self.agent.life
        exc = sys.exc_info()[1]
        if life.exit_code is None:
            if isinstance(exc, SystemExit):
                code = exc.code
                life.exit_code = code if isinstance(code, int) else (0 if code is None else 1)
                life.exit_reason = "sys.exit"
            elif exc is not None:
                with a.errors.quiet("forked child's exception"):
                    a.settings.record_exception(type(exc), exc, exc.__traceback__)
                life.exit_code, life.exit_reason = 1, f"uncaught {type(exc).__name__}"
            else:
                life.exit_code, life.exit_reason = 0, "end of program"
        a.finalize("exit")

    def after_fork_in_child(self) -> None:
        a = self.agent
        a.life.after_fork_in_child()
        with a.errors.quiet("fork handler (join watch)"):
            argv, prepare, join_as_rank = _process.process_argv(), a.prepare, self.join_as_rank
            probe = _loader_workers.WorkerProbe(a.dir, a.env).worker_args  # if this child is a DataLoader worker
            _patches.retarget(_join.Pending(lambda _args, _kwargs: join_as_rank(argv, False, True, prepare), probe))
