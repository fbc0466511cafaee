"""The capture agent that runs inside every training rank.  Standard library only at import time; torch is
touched only once the user's program imports it.  A capture problem never changes what the user's program
does: it is written to ``events.jsonl``, counted in ``settings.json``'s ``agent_errors`` and ignored.

In a rank it tees fds 1 and 2 (``output.log`` and the terminal), counts steps (optimizer steps; DDP forward
calls as a fallback), profiles a window of them after K warm-up steps, writes one gzipped trace and ends
the rank unless asked to keep going; it records the settings, exceptions, signals and the exit.  A process
is a rank from start-up when a launcher's variables say so, else from the moment it joins a process group
(``membership.py``, ``join.py``).

The folder is loaded by path as the package ``ddpdoctor_capture_agent`` (``sitecustomize.py`` under
``ddpdoctor run``, ``capture/env_switch.py`` under ``DDPDOCTOR_CAPTURE``).  The ``Agent`` here only connects
the parts: ``window.py`` (the step window, a pure state machine), ``profiler.py`` (torch.profiler over it),
``patches.py`` (the table of torch patches), ``recorder.py`` + ``settings.py`` (``settings.json``, whose
fields ``contract.py`` declares), ``lifecycle.py`` + ``hang.py`` (exits, signals, ending after the window,
hang dumps), ``log.py``, ``process.py`` (which processes are ranks, the fd tee), ``evidence.py`` /
``stacks.py`` / ``gil.py`` / ``loader.py`` / ``compile.py`` (window evidence), ``overrides.py`` (``run --try``).
"""

from __future__ import annotations

import os
import socket
import sys
import time

from . import compile as _compile  # torch.compile compilations in the window
from . import evidence as _evidence  # window evidence
from . import gil as _gil
from . import hang as _hang
from . import jobtree as _jobtree  # the job's whole process tree, for contention
from . import join as _join  # a process becomes a rank when it joins a process group
from . import lifecycle as _lifecycle
from . import loader as _loader  # the DataLoader's window: wait, CPU of the loading
from . import log as _log
from . import membership as _membership  # this rank's process group: joins, the provisional folder, forks
from . import overrides as _overrides  # `run --try` changes applied in this rank
from . import patches as _patches
from . import process as _process
from . import profiler as _profiler
from . import quiet as _quiet  # warnings about a `run --try` setting: to the log
from . import recorder as _recorder
from . import settings as _settings
from . import stacks as _stacks
from . import watch as _watch  # `run --watch`: incidents instead of a start-up window
from . import window as _window

is_launcher_process, started_by_launcher = _process.is_launcher_process, _process.started_by_launcher
is_helper_process, should_activate = _process.is_helper_process, _process.should_activate
_first_int, _env_int, process_argv = _process.first_int, _process.env_int, _process.process_argv
_LOCAL_RANK_VARS, _WORLD_VARS = _process.LOCAL_RANK_VARS, _process.WORLD_VARS
SETTINGS_SCHEMA = _recorder.SETTINGS_SCHEMA
# the span around iter(loader) while the window records (trace/classify.py counts it as DataLoader wait)
LOADER_ITER_SPAN = "enumerate(DataLoader)#DataLoader.__iter__"

AGENT = None  # this process's agent, once it is a rank


def maybe_activate(prepare=None) -> None:
    """Start the agent in this process if it is a rank at start-up (``process.activation``), else watch
    for it to join a process group.  ``prepare(env)`` (the environment switch's run records) runs when a
    process becomes a rank and returns the callable that attaches them to the agent, or None (no capture)."""
    argv = process_argv()
    mode = _process.activation(os.environ, argv, os.getppid())
    if mode in (_process.RANK, _process.PROVISIONAL):
        start(os.environ, provisional=mode == _process.PROVISIONAL, prepare=prepare)
    elif mode == _process.ON_JOIN:
        spawned = _process.is_spawned_child(argv)
        _join.watch(_join.Pending(lambda _args, _kwargs: join_as_rank(argv, spawned, False, prepare)))


def start(env, provisional: bool = False, prepare=None, launcher: str | None = None):
    """The agent of this process, started (``AGENT``)."""
    global AGENT
    AGENT = Agent(env, provisional=provisional)
    AGENT.prepare, AGENT.launcher = prepare, launcher
    AGENT.install()
    return AGENT


def join_as_rank(argv: list[str], spawned: bool, forked: bool, prepare):
    """This process just joined a process group: it is a rank from now on (the agent, started as at a
    torchrun rank's start-up).  None when the run records refuse it (another run's bundle)."""
    torch = sys.modules.get("torch")
    rank, world, local = _join.group_identity(torch, os.environ)
    attach = None
    if prepare is not None:
        attach = prepare(_join.rank_env(os.environ, rank, world, local))
        if attach is None:
            return None
    env = _join.rank_env(os.environ, rank, world, local)
    agent = start(env, prepare=prepare, launcher=_join.launcher_of(env, argv, sys.modules, spawned, forked))
    agent.torch = torch
    if forked:
        agent.group.end_with_forked_child()
    if attach is not None:
        attach(agent)
    return agent


class Agent:
    """Connects the parts: the torch hooks (patches.PATCHES names these methods and the
    recorder's) feed the step window, and the window's decisions drive the profiler and the end."""

    def __init__(self, env, provisional: bool = False):
        self.env = env
        self.bundle = env["DDPDOCTOR_BUNDLE"]
        self.rank = _process.resolve_rank(env)
        self.local_rank = _first_int(env, _LOCAL_RANK_VARS, 0)
        self.world_size = _first_int(env, _WORLD_VARS, 1)
        self.pid = os.getpid()
        # the command's own process records aside until it joins (a rank) or ends (rank 0 if none joined)
        self.provisional = provisional
        self.dir = os.path.join(self.bundle, "ranks", f".process-{self.pid}" if provisional else f"rank{self.rank}")
        self.joins = 0  # process groups joined (a re-init after destroy_process_group: the first one's window)
        self.window_group = None  # which of them (1-based) the window started in
        self.launcher = None  # the launcher that started this rank (join.LAUNCHERS), once known
        self.prepare = None  # the environment switch's run records for a forked child that joins
        self.group = _membership.Membership(self, join_as_rank)
        self.errors = _log.ErrorCounter()
        self.log = _log.EventLog(self.rank, self.pid, self.errors)
        self.lock = self.log.lock
        self.finalized = False
        self.torch = None
        self.tee_pid = None
        self.loader_timing = _loader.LoaderTiming()
        self.window = _window.from_env(env, _env_int, time.time(), self.loader_timing.drain_state)
        self.profiler = _profiler.WindowProfiler(self)
        self.settings = _recorder.SettingsRecorder(self, _settings, _env_int)
        self.life = _lifecycle.Lifecycle(self)
        self.ending = _lifecycle.Ending(self, _hang)
        self.evidence = _evidence.Evidence(
            env, _stacks, _gil, work_dir=self.dir, step_of=lambda: self.window.steps, jobtree=_jobtree
        )
        self.compile_watch = _compile.CompileWatch()
        self.changes = _overrides.from_env(env)  # `run --try`: None on a plain run
        self.trial = _overrides.trial_record(self.changes)  # settings.json's "trial": what applied, what not
        self.watch = _watch.Watch(self) if env.get("DDPDOCTOR_WATCH") == "1" else None

    # what hang.HangWatch and the other parts read
    @property
    def steps(self) -> int:
        return self.window.steps

    @property
    def last_step_time(self) -> float:
        return self.window.last_step_time

    # ---------------------------------------------------------------- basics
    def event(self, kind: str, **fields) -> None:
        self.log.write(kind, fields)

    def internal_error(self, where: str, exc: BaseException) -> None:
        """A capture problem the agent goes on from: counted, and a ``ddpdoctor_error`` event."""
        self.errors.count(where, exc)
        self.event("ddpdoctor_error", where=where, error=f"{type(exc).__name__}: {exc}")

    def _evidence_hook(self, name: str, *args) -> None:
        """Window evidence (evidence.py): contention, stack samples, batch fingerprints."""
        try:
            getattr(self.evidence, name)(*args)
        except Exception as exc:
            self.internal_error(f"evidence {name}", exc)

    def _compile_hook(self, name: str) -> None:
        """torch.compile's compilations in the window (compile.py)."""
        try:
            getattr(self.compile_watch, name)()
        except Exception as exc:
            self.internal_error(f"compile {name}", exc)

    # ---------------------------------------------------------------- install
    def install(self) -> None:
        os.environ["DDPDOCTOR_ACTIVE_PID"] = str(self.pid)
        os.environ["DDPDOCTOR_ACTIVE_RANK"] = str(self.rank)
        os.makedirs(self.dir, exist_ok=True)
        if self.env.get("DDPDOCTOR_NCCL_FILE_OWNED") == "1":
            os.environ["NCCL_DEBUG_FILE"] = os.path.join(self.dir, "nccl.log")
        self.log.open(os.path.join(self.dir, "events.jsonl"))
        if self.env.get("DDPDOCTOR_NO_TEE") != "1":
            try:
                self.tee_pid = _process.start_fd_tee(
                    os.path.join(self.dir, "output.log"),
                    self.env.get("DDPDOCTOR_TERM_OUT"),
                    self.env.get("DDPDOCTOR_TERM_ERR"),
                )
            except Exception as exc:
                self.internal_error("fd tee", exc)
        if self.trial is not None:  # torch's warnings about ddpdoctor's own settings: the rank's log only
            _quiet.install(self.trial["applied"], os.path.join(self.dir, "output.log"))
        w = self.window
        self.event(
            "start",
            pid=self.pid,
            ppid=os.getppid(),
            tee_pid=self.tee_pid,
            hostname=socket.gethostname(),
            local_rank=self.local_rank,
            world_size=self.world_size,
            warmup=w.warmup,
            active=w.active,
            keep_going=w.keep_going,
        )
        self.life.install()
        _patches.install(self)
        self.ending.start()
        if self.watch is not None:
            self.watch.start()
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        global AGENT
        if os.getpid() != self.pid:
            AGENT = None  # a forked child: a rank of its own only once it joins (membership.py)
            self.group.after_fork_in_child()

    def process_group_joined(self, result, *args, **kwargs) -> None:
        """init_process_group returned (membership.py)."""
        self.group.joined(result, *args, **kwargs)

    def launcher_name(self) -> str:
        return self.group.launcher_name()

    # ---------------------------------------------------------------- `run --try` at construction
    def tries_dataloader(self) -> bool:
        return bool(self.changes) and any(k.startswith("dataloader.") for k in self.changes)

    def tried_dataloader(self, orig, args, kwargs):
        """`run --try dataloader.*`: DataLoader(...) with the tried arguments."""
        new_args, new_kwargs = self._tried(orig, args[0], args[1:], kwargs, "dataloader")
        return (args[0], *new_args), new_kwargs

    def tried_ddp(self, orig, args, kwargs):
        """`run --try ddp.*`: the same DistributedDataParallel(...) call with the tried arguments."""
        if not self.changes:
            return args, kwargs
        new_args, new_kwargs = self._tried(orig, args[0], args[1:], kwargs, "ddp")
        return (args[0], *new_args), new_kwargs

    def _tried(self, func, obj, args, kwargs, prefix):
        """The constructor's arguments with the `run --try` changes; unchanged (and said why) if binding fails."""
        try:
            return _overrides.bind(func, obj, args, kwargs, self.changes, prefix, self.trial)
        except Exception as exc:  # recorded in settings.json's trial.skipped
            self.trial["skipped"][prefix] = f"{type(exc).__name__}: {exc}"[:300]
            return args, kwargs

    # ---------------------------------------------------------------- torch hooks (patches.PATCHES)
    def torch_imported(self, torch) -> None:
        self.torch = torch

    def compile_called(self, *args, **kwargs) -> None:
        """torch.compile: from now on a patched call that Dynamo traces skips the hooks (patches.py);
        without torch.compile the patched calls never check."""
        self.settings.compile_called()
        torch = self.torch or sys.modules.get("torch")
        _patches.set_compile_check(getattr(getattr(torch, "compiler", None), "is_compiling", None))

    def ddp_created(self, _result, ddp, *args, **kwargs) -> None:
        if self.settings.ddp_seen(ddp):
            self.event("ddp", step=self.steps)
            self.settings.measure_float64(ddp)
            if self.changes:
                try:
                    _overrides.after_ddp(ddp, self.torch or sys.modules.get("torch"), self.changes, self.trial)
                except Exception as exc:  # a change that cannot apply is reported, not fatal
                    self.trial["skipped"]["ddp (after construction)"] = f"{type(exc).__name__}: {exc}"[:300]

    def ddp_forward(self, ddp, *args, **kwargs) -> None:
        """A forward pass of the DDP model: one micro-batch, and a step when steps are counted at
        forward calls (no optimizer ever stepped, window.StepWindow.forward)."""
        self._evidence_hook("forward_entered")
        self.settings.ddp_seen(ddp)
        synced = bool(getattr(ddp, "require_backward_grad_sync", True) and getattr(ddp, "_sync_gradients", True))
        b = self.window.forward(synced, time.time())
        if b is not None and b.switched:
            fallback = self.window.forward_fallback
            self.event(
                "step_source",
                source="ddp_forward",
                forward_calls=self.window.forward_calls,
                message=f"no optimizer step in {fallback} forward passes: steps are counted at DDP forward calls",
            )
        if b is not None:
            self._on_boundary(b)

    def fsdp_forward(self, fsdp, *args, **kwargs) -> None:
        if self.settings.is_fsdp_root(fsdp):
            self.window.micro_batch(bool(getattr(fsdp, "_sync_gradients", True)))

    def loader_iter_span(self, loader, *args, **kwargs):
        """While the window records: a span around ``iter(loader)`` (a new epoch: the old workers shut
        down, new ones start) named like the profiler's own ``enumerate(DataLoader)#…__next__`` spans,
        so analysis counts it as DataLoader wait, not as unexplained time."""
        torch = self.torch
        if self.profiler.prof is None or torch is None:
            return None
        return torch.profiler.record_function(LOADER_ITER_SPAN)

    def dataset_content(self, info: dict, loader) -> None:
        """What one epoch covers on this rank (``samples_per_epoch``) and, on a loader that walks the whole
        dataset with nothing sharding it on a multi-rank job, a content hash of a few fixed items
        (``dataset_fingerprint``): the analysis compares them across ranks (DDPDOCTOR_DATASET_FINGERPRINT=0: off)."""
        try:
            info["samples_per_epoch"] = per_epoch = _loader.samples_per_epoch(loader)
            n = info.get("dataset_len")
            if (
                self.world_size > 1
                and not info.get("sharded_by")
                and not info.get("iterable_dataset")
                and isinstance(n, int)
                and n > 0
                and per_epoch == n
                and self.torch is not None
                and self.env.get("DDPDOCTOR_DATASET_FINGERPRINT") != "0"
            ):
                info["dataset_fingerprint"] = _loader.dataset_fingerprint(
                    loader.dataset, n, self.torch, _evidence.batch_fingerprint
                )
        except Exception as exc:  # a dataset that cannot be read here: no fingerprint
            info["dataset_fingerprint"] = None
            self.internal_error("dataset fingerprint", exc)

    def loader_next(self, it, *args, **kwargs) -> None:
        info = getattr(it, "_ddpdoctor_info", None)
        if info is not None:
            info["batches"] += 1
        self.evidence.phase = "loader"
        self.loader_timing.entered()
        if self.watch is not None:
            self.watch.loader_entered()

    def batch_returned(self, batch, it, *args, **kwargs) -> None:
        info = getattr(it, "_ddpdoctor_info", None)
        if info is not None:  # next() calls that returned nothing ended a pass (StopIteration)
            info["returned"] = info.get("returned", 0) + 1
        self.loader_timing.returned()
        if self.watch is not None:
            self.watch.loader_returned()
        self._evidence_hook("batch_returned", info, batch)

    def profiler_prepared(self, prof, *args, **kwargs) -> None:
        if prof is not self.profiler.prof and not getattr(prof, "_ddpdoctor_own", False):
            self.user_profiler_starts()

    def user_profiler_starts(self) -> None:
        """The script runs its own torch.profiler: two cannot run at once, so ddpdoctor
        steps aside (keeps what it has recorded) and lets training run on."""
        if not self.window.user_profiler_starts():
            return
        self.event(
            "user_profiler",
            step=self.steps,
            message="the script starts its own torch.profiler: ddpdoctor does not record (or stops recording) "
            "and does not stop training; analyze the script's own traces",
        )
        if self.window.profiling:
            self.profiler.stop(complete=False)

    def optimizer_stepped(self, optimizer, args, kwargs) -> None:
        """The global optimizer step post hook (registered, not wrapped: it guards itself)."""
        try:
            b = self.window.optimizer_step(self.settings.optimizer_seen(optimizer), time.time())
        except Exception as exc:
            self.internal_error("optimizer hook", exc)
            return
        if b is not None:
            self._on_boundary(b)

    # ---------------------------------------------------------------- a window the script marks (profiler.py)
    def take_manual_window(self) -> bool:
        return self.profiler.take_manual_window()

    def mark_window_start(self) -> bool:
        return self.profiler.mark_window_start()

    def mark_window_end(self) -> None:
        self.profiler.mark_window_end()

    # ---------------------------------------------------------------- the window's decisions
    def _on_boundary(self, b) -> None:
        """Carry out what the step window decided at this boundary."""
        prev = self.evidence.own_work_begins()
        try:
            self._carry_out(b)
            if self.watch is not None:
                self.watch.boundary(b)  # guards itself
        finally:
            self.evidence.own_work_ends(prev)

    def _carry_out(self, b) -> None:
        try:
            self.event(
                "step",
                step=b.step,
                source=self.window.step_source,
                duration_s=round(b.duration, 6) if b.duration is not None else None,
            )
            end = b.action == _window.EXIT
            if b.action == _window.START:
                torch = self.torch or sys.modules.get("torch")
                if torch is not None:
                    self.profiler.start(torch)
                    self._compile_hook("window_start")
                    self.window_group = self.joins or None
            elif b.action == _window.STEP:
                self.profiler.step()
                self._compile_hook("step")
            elif b.action == _window.STOP:
                self._compile_hook("window_stop")
                self.profiler.stop(complete=True)
                self.settings.write()
                end = b.then_exit
        except Exception as exc:
            self.internal_error("step boundary", exc)
            return
        if end:
            self.ending.stop_training()

    def finalize(self, why: str) -> None:
        """Flush whatever exists: the trace of a window cut short, the settings, the exit."""
        if os.getpid() != self.pid:
            return
        with self.lock:
            if self.finalized:
                return
            self.finalized = True
        if self.watch is not None:
            self.watch.finish()  # guards itself
        try:
            if self.window.exit():
                # a window longer than --active that the script's end cut: complete, its open step dropped
                cut = self.window.extended_and_cut
                self.window.cut_by_script_end = cut
                self._compile_hook("window_stop")  # the compilations of the window, as at a STOP
                self.profiler.stop(complete=cut, drop_open_step=cut)
        except Exception as exc:
            self.internal_error("flushing the trace", exc)
        try:
            self.settings.write()
        except Exception as exc:
            self.internal_error("settings", exc)
        if self.ending.hang is not None:
            self.ending.hang.flush()
        self.event("exit", code=self.life.exit_code, reason=self.life.exit_reason or why, steps_completed=self.steps)
        with self.errors.quiet("flushing stdout"):
            sys.stdout.flush()
            sys.stderr.flush()
        if self.provisional:
            self.group.end_provisional()
