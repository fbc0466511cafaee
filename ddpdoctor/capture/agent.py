"""The capture agent that runs inside every training rank (loaded by the injected
``sitecustomize``).  Standard library only at import time; torch is touched only once the
user's own program imports it.  Every hook is wrapped so that a capture problem never
changes what the user's program does: it is written to ``events.jsonl`` and ignored.

What it does in a rank:
- tees file descriptors 1 and 2 (a forked copy of this process reads a pipe and writes
  ``output.log`` and the terminal), so what C/C++ code writes (NCCL watchdog) is kept;
- counts steps (the global optimizer step post hook; DDP forward calls as a fallback),
  skips K warm-up steps, profiles N steps with ``ProfilerStep#N`` marks, writes one
  gzipped trace, then ends the process with exit code 0 unless asked to keep going;
- records DataLoader / DDP / optimizer / precision / memory settings, exceptions (OOM
  above all, caught ones too), signals and the exit in ``settings.json`` and
  ``events.jsonl``.

This file is loaded by path (not as part of the ddpdoctor package) so the user's
interpreter needs nothing installed; it loads its two parts the same way from beside itself:
``agent_process.py`` (which processes are ranks, the fd tee) and ``agent_settings.py``
(settings read off the user's objects).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
import weakref

SETTINGS_SCHEMA = "ddpdoctor.settings/1"


# --------------------------------------------------------------------------------------
# the agent's parts: loaded by path from beside this file (this file is itself loaded by
# path, as ddpdoctor_capture_agent.py in the run's private folder, or as agent.py in the package)
# --------------------------------------------------------------------------------------

def _load_part(part: str):
    stem = os.path.splitext(os.path.basename(__file__))[0]
    name = f"ddpdoctor_capture_{stem}_{part}"
    mod = sys.modules.get(name)
    if mod is None:
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{stem}_{part}.py")
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


_process = _load_part("process")
_settings = _load_part("settings")
_evidence, _stacks = _load_part("evidence"), _load_part("stacks")     # window evidence (agent_evidence.py)
_hang = _load_part("hang")
_overrides = _load_part("overrides")       # `run --try` changes applied in this rank (agent_overrides.py)
is_launcher_process, started_by_launcher = _process.is_launcher_process, _process.started_by_launcher
is_helper_process, should_activate, start_fd_tee = _process.is_helper_process, _process.should_activate, _process.start_fd_tee
_first_int, _env_int, _process_argv = _process.first_int, _process.env_int, _process._process_argv
_LAUNCHER_RANK_VARS, _LOCAL_RANK_VARS, _WORLD_VARS = (_process._LAUNCHER_RANK_VARS, _process._LOCAL_RANK_VARS,
                                                     _process._WORLD_VARS)
_loader_settings, _optimizer_settings, _ddp_settings = (_settings._loader_settings, _settings._optimizer_settings,
                                                        _settings._ddp_settings)
_precision, _memory, _step_stats, _nccl_version = (_settings._precision, _settings._memory, _settings._step_stats,
                                                   _settings._nccl_version)
_framework_from_stack, _framework_from_modules, _fsdp_settings, _accumulation = (
    _settings._framework_from_stack, _settings._framework_from_modules, _settings._fsdp_settings, _settings._accumulation)


def maybe_activate() -> None:
    argv = _process_argv()
    if should_activate(os.environ, argv, os.getppid()):
        global AGENT
        AGENT = Agent(os.environ)
        AGENT.install()


AGENT = None


# --------------------------------------------------------------------------------------
# import hooks: patch torch modules when the user's program imports them
# --------------------------------------------------------------------------------------

class _PostImportFinder:
    """Runs a callback right after one of the named modules has been executed."""

    def __init__(self, callbacks):
        self.callbacks = callbacks
        self._busy = set()

    def find_spec(self, name, path=None, target=None):
        cb = self.callbacks.get(name)
        if cb is None or name in self._busy:
            return None
        self._busy.add(name)
        spec = None
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        except Exception:  # noqa: BLE001
            spec = None
        finally:
            self._busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader = spec.loader
        orig_exec = loader.exec_module

        def exec_module(module):
            orig_exec(module)
            try:
                cb(module)
            except Exception as exc:  # noqa: BLE001
                if AGENT is not None:
                    AGENT.internal_error(f"patching {name}", exc)

        loader.exec_module = exec_module        # this loader instance belongs to this one spec
        return spec


def _safe(fn):
    """Decorator for hook bodies: never let a capture problem reach the user's program."""
    def wrapper(self, *a, **k):
        try:
            return fn(self, *a, **k)
        except SystemExit:
            raise
        except Exception as exc:  # noqa: BLE001
            self.internal_error(fn.__name__, exc)
    return wrapper


class Agent:
    def __init__(self, env):
        self.env = env
        self.bundle = env["DDPDOCTOR_BUNDLE"]
        self.rank = _process.resolve_rank(env)
        self.local_rank = _first_int(env, _LOCAL_RANK_VARS, 0)
        self.world_size = _first_int(env, _WORLD_VARS, 1)
        self.warmup = max(0, _env_int(env, "DDPDOCTOR_WARMUP", 5))
        self.active = max(1, _env_int(env, "DDPDOCTOR_ACTIVE", 5))
        self.keep_going = env.get("DDPDOCTOR_KEEP_GOING") == "1"
        self.dir = os.path.join(self.bundle, "ranks", f"rank{self.rank}")
        self.trace_name = f"rank{self.rank}.pt.trace.json.gz"
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.events_fh = None
        self.steps = 0                    # completed steps (step boundaries seen)
        self.step_source = None           # "optimizer" or "ddp_forward"
        self.first_optimizer = None
        self.optimizer_info = None
        self.forward_calls = 0
        # forward passes with no optimizer step before steps are counted at forward calls
        self.forward_fallback = max(2, _env_int(env, "DDPDOCTOR_FORWARD_FALLBACK", 64))
        self.micro_batches = 0            # DDP/FSDP forward passes since the last optimizer step
        self.synced_micro_batches = 0     # ... of which with gradient sync on (not under no_sync)
        self.micro_per_step = []          # per optimizer step: forward passes
        self.synced_per_step = []
        self.framework_seen = None        # from the call stack at the first optimizer step
        self.fsdp_info = None
        self.fsdp_root = None
        self.prof = None
        self.recorded = 0                 # active steps recorded in the trace
        self.window_done = False
        self.trace_written = None
        self.stop_requested = False
        self.ddp_ref = None
        self.loaders = []                 # [(weakref, info dict)]
        self.set_epoch_called = False
        self.autocast = set()             # (device_type, dtype)
        self.grad_scaler = False
        self.compiled = False
        self.exceptions = 0
        self.ooms = 0
        self.seen_exc = set()                # ids of exceptions already recorded
        self.first_step = None
        self.signal_handled = False
        self.exit_code = None
        self.exit_reason = None
        self.finalized = False
        self.step_times = []
        self.last_step_time = time.time()
        self.torch = None
        self.tee_pid = None
        self.user_profiler = False
        self.evidence = _evidence.Evidence(env, _stacks)
        self.changes = _overrides.from_env(env)          # `run --try`: None on a plain run
        self.trial = None if self.changes is None else {
            "changes": self.changes, "skipped": {},
            "applied": {k: {"from": None, "to": v} for k, v in self.changes.items() if k.startswith("env.")}}

    # ---------------------------------------------------------------- basics
    def event(self, kind: str, **fields) -> None:
        if os.getpid() != self.pid:        # a forked child (DataLoader worker) records nothing
            return
        rec = {"time": time.time(), "rank": self.rank, "kind": kind}
        rec.update(fields)
        try:
            line = json.dumps(rec, default=str) + "\n"
            with self.lock:
                if self.events_fh is not None:
                    self.events_fh.write(line)
                    self.events_fh.flush()
        except Exception:  # noqa: BLE001
            pass

    def internal_error(self, where: str, exc: BaseException) -> None:
        self.event("ddpdoctor_error", where=where, error=f"{type(exc).__name__}: {exc}")

    def _evidence_hook(self, name: str, *args) -> None:
        """Window evidence (agent_evidence.py): contention, stack samples, batch fingerprints."""
        try:
            getattr(self.evidence, name)(*args)
        except Exception as exc:  # noqa: BLE001
            self.internal_error(f"evidence {name}", exc)

    # ---------------------------------------------------------------- install
    def install(self) -> None:
        os.environ["DDPDOCTOR_ACTIVE_PID"] = str(self.pid)
        os.environ["DDPDOCTOR_ACTIVE_RANK"] = str(self.rank)
        os.makedirs(self.dir, exist_ok=True)
        if self.env.get("DDPDOCTOR_NCCL_FILE_OWNED") == "1":
            os.environ["NCCL_DEBUG_FILE"] = os.path.join(self.dir, "nccl.log")
        self.events_fh = open(os.path.join(self.dir, "events.jsonl"), "a", buffering=1, encoding="utf-8")
        if self.env.get("DDPDOCTOR_NO_TEE") != "1":
            try:
                self.tee_pid = start_fd_tee(os.path.join(self.dir, "output.log"),
                                            self.env.get("DDPDOCTOR_TERM_OUT"), self.env.get("DDPDOCTOR_TERM_ERR"))
            except Exception as exc:  # noqa: BLE001
                self.internal_error("fd tee", exc)
        self.event("start", pid=self.pid, ppid=os.getppid(), tee_pid=self.tee_pid, hostname=socket.gethostname(),
                   local_rank=self.local_rank, world_size=self.world_size,
                   warmup=self.warmup, active=self.active, keep_going=self.keep_going)
        self._orig_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        self._orig_thread_hook = threading.excepthook
        threading.excepthook = self._thread_excepthook
        self._orig_exit = sys.exit
        sys.exit = self._sys_exit
        atexit.register(self._atexit)
        self._install_signal_handlers()
        sys.meta_path.insert(0, _PostImportFinder({
            "torch": self._on_torch,
            "torch.optim.optimizer": self._on_optimizer_module,
            "torch.nn.parallel.distributed": self._on_ddp_module,
            "torch.utils.data.dataloader": self._on_dataloader_module,
            "torch.utils.data.distributed": self._on_sampler_module,
            "torch.amp.autocast_mode": self._on_autocast_module,
            "torch.amp.grad_scaler": self._on_scaler_module,
            "torch.profiler.profiler": self._on_profiler_module,
            "torch.distributed.fsdp.fully_sharded_data_parallel": self._on_fsdp1_module,
            "torch.distributed.fsdp": self._on_fsdp2_module,
        }))
        # modules imported before us (unusual): patch now
        for name, cb in (("torch", self._on_torch), ("torch.optim.optimizer", self._on_optimizer_module),
                         ("torch.nn.parallel.distributed", self._on_ddp_module),
                         ("torch.utils.data.dataloader", self._on_dataloader_module),
                         ("torch.utils.data.distributed", self._on_sampler_module),
                         ("torch.amp.autocast_mode", self._on_autocast_module),
                         ("torch.amp.grad_scaler", self._on_scaler_module),
                         ("torch.profiler.profiler", self._on_profiler_module),
                         ("torch.distributed.fsdp.fully_sharded_data_parallel", self._on_fsdp1_module),
                         ("torch.distributed.fsdp", self._on_fsdp2_module)):
            if name in sys.modules:
                cb(sys.modules[name])
        threading.Thread(target=self._watchdog, name="ddpdoctor-watchdog", daemon=True).start()
        self.hang = _hang.HangWatch(self)        # stacks of every rank when one waits too long (agent_hang.py)
        self.hang.start()
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """A forked child (fork-start DataLoader worker, os.fork in user code) is not this
        rank: give it back default signal handling and detach it from the rank's files."""
        if os.getpid() == self.pid:
            return
        try:
            signal.set_wakeup_fd(-1)
        except (ValueError, OSError):
            pass
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            try:
                if signal.getsignal(sig) == self._on_signal:
                    signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        try:
            if sys.excepthook == self._excepthook:
                sys.excepthook = self._orig_excepthook
            if threading.excepthook == self._thread_excepthook:
                threading.excepthook = self._orig_thread_hook
            if sys.exit == self._sys_exit:
                sys.exit = self._orig_exit
        except Exception:  # noqa: BLE001
            pass

    def _install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            try:
                prev = signal.getsignal(sig)
                if sig == signal.SIGINT and prev is not signal.default_int_handler:
                    continue
                if sig != signal.SIGINT and prev not in (signal.SIG_DFL, None):
                    continue
                signal.signal(sig, self._on_signal)
            except (ValueError, OSError):
                pass

        try:
            r, w = os.pipe()
            os.set_blocking(w, False)
            signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            threading.Thread(target=self._signal_watcher, args=(r,), name="ddpdoctor-signals", daemon=True).start()
        except (ValueError, OSError):
            pass

    def _signal_watcher(self, rfd):
        """Python runs signal handlers only in the main thread, between bytecodes: a rank
        blocked in a C++ collective would not die on SIGTERM until the call returns.  The
        wakeup fd tells this thread that a signal came; if the main thread has not handled
        it within 2 s, flush what can be flushed from here and die by that signal as the
        process would have without ddpdoctor."""
        while True:
            try:
                data = os.read(rfd, 64)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum not in (signal.SIGTERM, signal.SIGHUP) or signal.getsignal(signum) != self._on_signal:
                    continue
                time.sleep(2.0)
                if self.signal_handled:
                    continue
                name = signal.Signals(signum).name
                self.event("signal", signal=name, step=self.steps, handled_by="watcher thread (main thread blocked)")
                self.exit_reason = f"signal {name}"
                with self.lock:
                    self.finalized = True           # the profiler cannot be stopped from this thread
                self.exit_code = -signum
                # the profiler cannot be stopped from here (its session belongs to the main
                # thread; torch 2.13 finds "no active profiling session" and the process dies)
                self.event("exit", code=-signum, reason=self.exit_reason, steps_completed=self.steps)
                try:
                    # only what is cached: torch objects may be locked by the blocked main thread
                    self.write_settings(lite=True)
                except Exception:  # noqa: BLE001
                    pass
                try:
                    import ctypes

                    libc = ctypes.CDLL(None)
                    libc.signal(signum, 0)          # SIG_DFL
                    os.kill(os.getpid(), signum)
                    time.sleep(5)
                except Exception:  # noqa: BLE001
                    pass
                os._exit(128 + signum)

    def _on_signal(self, signum, frame):
        if os.getpid() != self.pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signal_handled = True
        name = signal.Signals(signum).name
        self.event("signal", signal=name, step=self.steps)
        self.exit_reason = f"signal {name}"
        self.exit_code = 130 if signum == signal.SIGINT else -signum
        self.finalize(f"signal {name}")
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    # ---------------------------------------------------------------- torch hooks
    def _on_torch(self, torch):
        self.torch = torch
        oom = getattr(torch, "OutOfMemoryError", None)
        if oom is not None:
            orig_init = oom.__init__
            agent = self

            def __init__(exc_self, *args, **kwargs):
                orig_init(exc_self, *args, **kwargs)
                agent._on_oom_created(exc_self, args)

            try:
                oom.__init__ = __init__
            except (TypeError, AttributeError):
                pass
        comp = getattr(torch, "compile", None)
        if comp is not None and not getattr(comp, "_ddpdoctor", False):
            agent = self

            def compile(*args, **kwargs):
                agent.compiled = True
                return comp(*args, **kwargs)

            compile.__wrapped__ = comp
            compile.__doc__ = comp.__doc__
            compile._ddpdoctor = True
            torch.compile = compile

    @_safe
    def _on_oom_created(self, exc, args):
        if id(exc) in self.seen_exc:
            return
        self.seen_exc.add(id(exc))
        self.ooms += 1
        msg = str(args[0]) if args else ""
        where = None
        frame = sys._getframe(0)
        for _ in range(3):                  # 0 here, 1 _safe, 2 the patched __init__, 3 who raised
            frame = frame.f_back if frame is not None else None
        if frame is not None:               # None when C++ code raised it outside any Python frame
            where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        self.event("oom", step=self.steps, type=type(exc).__name__, message=msg[:2000], where=where, caught=None)

    def _on_optimizer_module(self, mod):
        mod.register_optimizer_step_post_hook(self._optimizer_post_hook)

    def _on_ddp_module(self, mod):
        cls = mod.DistributedDataParallel
        orig_init, orig_forward = cls.__init__, cls.forward
        agent = self

        def __init__(ddp_self, *args, **kwargs):
            if agent.changes:                # `run --try ddp.*`: the same call with the tried arguments
                args, kwargs = agent._tried(orig_init, ddp_self, args, kwargs, "ddp")
            orig_init(ddp_self, *args, **kwargs)
            agent._on_ddp_created(ddp_self)

        def forward(ddp_self, *args, **kwargs):
            agent._evidence_hook("forward_entered")
            agent._on_ddp_forward(ddp_self)
            return orig_forward(ddp_self, *args, **kwargs)

        __init__.__wrapped__, forward.__wrapped__ = orig_init, orig_forward
        cls.__init__, cls.forward = __init__, forward

    def _on_fsdp1_module(self, mod):
        cls = mod.FullyShardedDataParallel
        orig_init, orig_forward = cls.__init__, cls.forward
        agent = self

        def __init__(fsdp_self, module, *args, **kwargs):
            orig_init(fsdp_self, module, *args, **kwargs)
            agent._on_fsdp_created("fsdp1", fsdp_self, kwargs)

        def forward(fsdp_self, *args, **kwargs):
            agent._on_fsdp_forward(fsdp_self)
            return orig_forward(fsdp_self, *args, **kwargs)

        __init__.__wrapped__, forward.__wrapped__ = orig_init, orig_forward
        cls.__init__, cls.forward = __init__, forward

    def _on_fsdp2_module(self, mod):
        orig = getattr(mod, "fully_shard", None)
        if orig is None or getattr(orig, "_ddpdoctor", False):
            return
        agent = self

        def fully_shard(module, *args, **kwargs):
            out = orig(module, *args, **kwargs)
            agent._on_fsdp_created("fsdp2", module, kwargs)
            return out

        for attr in ("__doc__", "__name__", "__qualname__", "__module__"):
            try:
                setattr(fully_shard, attr, getattr(orig, attr))
            except (AttributeError, TypeError):
                pass
        fully_shard.__wrapped__, fully_shard._ddpdoctor = orig, True
        mod.fully_shard = fully_shard

    @_safe
    def _on_fsdp_created(self, kind, module, kwargs):
        """The last FSDP wrap is the outermost (wrapping goes bottom-up): its settings are the
        job's; the count says how many modules were wrapped."""
        wraps = (self.fsdp_info or {}).get("wrapped_modules", 0) + 1
        self.fsdp_info = dict(_fsdp_settings(kind, module, kwargs), wrapped_modules=wraps)
        if wraps == 1:
            self.event("fsdp", kind=kind, step=self.steps)

    @_safe
    def _on_fsdp_forward(self, fsdp):
        """FSDP1: the root's forward is one micro-batch (nested FSDP units forward inside it)."""
        if self.fsdp_root is None:
            self.fsdp_root = weakref.ref(fsdp)
        if self.fsdp_root() is not fsdp:
            return
        self.micro_batches += 1
        if getattr(fsdp, "_sync_gradients", True):
            self.synced_micro_batches += 1

    def _on_dataloader_module(self, mod):
        base = mod._BaseDataLoaderIter
        orig_init, orig_next = base.__init__, base.__next__
        agent = self
        if self.changes and any(k.startswith("dataloader.") for k in self.changes):
            loader_init = mod.DataLoader.__init__

            def dataloader_init(dl_self, *args, **kwargs):   # `run --try dataloader.*`, at construction
                args, kwargs = agent._tried(loader_init, dl_self, args, kwargs, "dataloader")
                loader_init(dl_self, *args, **kwargs)

            dataloader_init.__wrapped__ = loader_init
            mod.DataLoader.__init__ = dataloader_init

        def __init__(it_self, loader, *args, **kwargs):
            orig_init(it_self, loader, *args, **kwargs)
            agent._on_loader_iter(it_self, loader)

        def __next__(it_self):
            info = getattr(it_self, "_ddpdoctor_info", None)
            if info is not None:
                info["batches"] += 1
            agent.evidence.phase = "loader"
            batch = orig_next(it_self)
            agent._evidence_hook("batch_returned", info, batch)
            return batch

        __init__.__wrapped__, __next__.__wrapped__ = orig_init, orig_next
        base.__init__, base.__next__ = __init__, __next__

    def _on_sampler_module(self, mod):
        cls = mod.DistributedSampler
        orig = cls.set_epoch
        agent = self

        def set_epoch(s, epoch, *a, **k):
            agent.set_epoch_called = True
            return orig(s, epoch, *a, **k)

        set_epoch.__wrapped__ = orig
        cls.set_epoch = set_epoch

    def _on_autocast_module(self, mod):
        cls = mod.autocast
        orig = cls.__enter__
        agent = self

        def __enter__(ac_self):
            try:
                if getattr(ac_self, "_enabled", True):
                    agent.autocast.add((str(getattr(ac_self, "device", "")), str(getattr(ac_self, "fast_dtype", ""))))
            except Exception:  # noqa: BLE001
                pass
            return orig(ac_self)

        __enter__.__wrapped__ = orig
        cls.__enter__ = __enter__

    def _on_scaler_module(self, mod):
        cls = mod.GradScaler
        orig = cls.__init__
        agent = self

        def __init__(sc_self, *a, **k):
            orig(sc_self, *a, **k)
            agent.grad_scaler = bool(getattr(sc_self, "_enabled", True))

        __init__.__wrapped__ = orig
        cls.__init__ = __init__

    def _on_profiler_module(self, mod):
        cls = mod._KinetoProfile
        orig = cls.prepare_trace
        agent = self

        def prepare_trace(prof_self, *a, **k):
            if prof_self is not agent.prof and not getattr(prof_self, "_ddpdoctor_own", False):
                agent._user_profiler_starts()
            return orig(prof_self, *a, **k)

        prepare_trace.__wrapped__ = orig
        cls.prepare_trace = prepare_trace

    @_safe
    def _user_profiler_starts(self):
        """The script runs its own torch.profiler: two cannot run at once, so ddpdoctor
        steps aside (keeps what it has recorded) and lets training run on."""
        if self.user_profiler:
            return
        self.user_profiler = True
        self.event("user_profiler", step=self.steps,
                   message="the script starts its own torch.profiler: ddpdoctor does not record (or stops recording) "
                           "and does not stop training; analyze the script's own traces")
        if self.prof is not None:
            self._stop_profiler(complete=False)
        self.window_done = True

    # ---------------------------------------------------------------- recorders
    @_safe
    def _on_ddp_created(self, ddp):
        if self.ddp_ref is None:
            self.ddp_ref = weakref.ref(ddp)
            self.event("ddp", step=self.steps)
            if self.changes:
                try:
                    _overrides.after_ddp(ddp, self.torch or sys.modules.get("torch"), self.changes, self.trial)
                except Exception as exc:  # noqa: BLE001 - a change that cannot apply is reported, not fatal
                    self.trial["skipped"]["ddp (after construction)"] = f"{type(exc).__name__}: {exc}"[:300]

    def _tried(self, func, obj, args, kwargs, prefix):
        """The constructor's arguments with the `run --try` changes; unchanged (and said why) if binding fails."""
        try:
            return _overrides.bind(func, obj, args, kwargs, self.changes, prefix, self.trial)
        except Exception as exc:  # noqa: BLE001
            self.trial["skipped"][prefix] = f"{type(exc).__name__}: {exc}"[:300]
            return args, kwargs

    @_safe
    def _on_loader_iter(self, it, loader):
        for ref, info in self.loaders:
            if ref() is loader:
                info["iterations"] += 1
                it._ddpdoctor_info = info
                return
        info = {"iterations": 1, "batches": 0}
        try:
            info.update(_loader_settings(loader))
        except Exception as exc:  # noqa: BLE001
            self.internal_error("dataloader settings", exc)
        self._evidence_hook("loader_created", info, loader)
        self.loaders.append((weakref.ref(loader), info))
        it._ddpdoctor_info = info

    @_safe
    def _on_ddp_forward(self, ddp):
        """A forward pass of the DDP (or FSDP1) model: one micro-batch.  Steps are optimizer
        steps whenever an optimizer steps at all; forward calls count steps only when many
        forward passes came and no optimizer ever stepped (a custom update, an engine
        that steps outside torch.optim), so accumulation never makes forward calls the unit."""
        if self.ddp_ref is None:
            self.ddp_ref = weakref.ref(ddp)
        self.forward_calls += 1
        self.micro_batches += 1
        if getattr(ddp, "require_backward_grad_sync", True) and getattr(ddp, "_sync_gradients", True):
            self.synced_micro_batches += 1
        if self.step_source == "optimizer":
            return
        if self.step_source is None and self.first_optimizer is None and self.forward_calls > self.forward_fallback:
            self.step_source = "ddp_forward"
            self.event("step_source", source="ddp_forward", forward_calls=self.forward_calls,
                       message=f"no optimizer step in {self.forward_fallback} forward passes: steps are counted "
                               "at DDP forward calls")
        if self.step_source == "ddp_forward":
            self._boundary()

    def _optimizer_post_hook(self, optimizer, args, kwargs):
        try:
            if self.first_optimizer is None:
                self.first_optimizer = weakref.ref(optimizer)
                self.optimizer_info = _optimizer_settings(optimizer)
                self.framework_seen = _framework_from_stack(sys._getframe(1)) or self.framework_seen
                if self.step_source is None:
                    self.step_source = "optimizer"
            if self.step_source != "optimizer" or self.first_optimizer() is not optimizer:
                return
            self.micro_per_step.append(self.micro_batches)
            self.synced_per_step.append(self.synced_micro_batches)
            del self.micro_per_step[:-200], self.synced_per_step[:-200]
            self.micro_batches = self.synced_micro_batches = 0
        except Exception as exc:  # noqa: BLE001
            self.internal_error("optimizer hook", exc)
            return
        self._boundary()

    def _boundary(self) -> None:
        """One training step has just finished."""
        try:
            now = time.time()
            dur = now - self.last_step_time
            self.step_times.append(dur)
            del self.step_times[:-100]
            self.last_step_time = now
            self.steps += 1
            # the first step's duration includes everything since the agent started (imports, setup)
            self.event("step", step=self.steps - 1, source=self.step_source,
                       duration_s=round(dur, 6) if self.steps > 1 else None)
            if self.stop_requested:
                raise_exit = True
            elif self.prof is None and not self.window_done and not self.user_profiler and self.steps >= self.warmup:
                self._start_profiler()
                raise_exit = False
            elif self.prof is not None:
                self.recorded += 1
                if self.recorded >= self.active:
                    self._stop_profiler(complete=True)
                    self.write_settings()
                    raise_exit = not self.keep_going
                else:
                    self.prof.step()
                    raise_exit = False
            else:
                raise_exit = False
        except Exception as exc:  # noqa: BLE001
            self.internal_error("step boundary", exc)
            return
        if raise_exit:
            self._stop_training()

    def _stop_training(self) -> None:
        """The window is recorded: end this rank with exit code 0.  SystemExit runs the
        user's ``finally`` blocks; a timer makes sure a hung cleanup cannot keep the rank alive."""
        if not self.stop_requested:
            self.stop_requested = True
            self.exit_reason = "window complete"
            self.exit_code = 0
            self.event("stop", step=self.steps, reason="profiled window complete; ending training (use --keep-going to continue)")
            self._touch(".window_done")
            self._wait_for_peers()
            t = threading.Timer(float(self.env.get("DDPDOCTOR_STOP_GRACE_S", "30")), self._force_exit)
            t.daemon = True
            t.start()
        raise SystemExit(0)

    def _wait_for_peers(self) -> None:
        """Stop together: a rank that ends first can take its peers down with it (Lightning's
        launcher kills the ranks it started when rank 0 raises; a peer still exporting its trace
        finds its collectives' partner gone).  Wait, bounded, until every rank of the world has
        finished its window; peers at the same step are there within milliseconds."""
        world = self.world_size
        torch = self.torch or sys.modules.get("torch")
        try:
            if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
                world = max(world, torch.distributed.get_world_size())
        except Exception:  # noqa: BLE001
            pass
        if world <= 1:
            return
        ranks_dir = os.path.join(self.bundle, "ranks")
        deadline = time.time() + float(self.env.get("DDPDOCTOR_STOP_WAIT_S", "20"))
        missing = list(range(world))
        while time.time() < deadline:
            # ranks recorded in this bundle (a per-node bundle under srun holds only its own)
            missing = [r for r in range(world) if os.path.isdir(os.path.join(ranks_dir, f"rank{r}"))
                       and not os.path.exists(os.path.join(ranks_dir, f"rank{r}", ".window_done"))]
            if not missing:
                return
            time.sleep(0.05)
        self.event("stop_wait", missing_ranks=missing,
                   message="stopping while these ranks had not finished their window")

    def _force_exit(self):
        self.event("forced_exit", reason="training did not end within the grace period after the window")
        self.finalize("forced exit")
        os._exit(0)

    def _touch(self, name):
        try:
            with open(os.path.join(self.dir, name), "w") as fh:
                fh.write(str(self.steps))
        except OSError:
            pass

    def _start_profiler(self) -> None:
        torch = self.torch or sys.modules.get("torch")
        if torch is None:
            return
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
        try:
            import torch.autograd.profiler as ap

            if getattr(ap, "_is_profiler_enabled", False):
                self._user_profiler_starts()
                return
        except Exception:  # noqa: BLE001
            pass
        prof = profile(activities=acts, record_shapes=True, with_stack=False, profile_memory=False)
        prof._ddpdoctor_own = True
        prof.record_steps = True                # without a schedule profile() would not mark ProfilerStep#N
        prof.step_num = self.steps              # ProfilerStep#<number of the step being recorded>
        prof.start()
        self.prof = prof
        self.first_step = self.steps
        self._evidence_hook("window_start", torch, self.steps)
        self.event("profiler_start", step=self.steps, activities=[str(a).split(".")[-1] for a in acts])
        try:
            self.write_settings()        # early copy: a hang or SIGKILL later still leaves the settings
        except Exception as exc:  # noqa: BLE001
            self.internal_error("settings", exc)

    def _stop_profiler(self, complete: bool) -> None:
        prof, self.prof = self.prof, None
        if prof is None:
            return
        self._evidence_hook("window_stop", self.recorded)
        self.window_done = True
        t0 = time.time()
        try:
            prof.stop()
        finally:
            t1 = time.time()
            path = os.path.join(self.dir, self.trace_name)
            raw, tmp = path + ".tmp.json", path + ".tmp.gz"
            # plain JSON first, then gzip at level 1: torch's own .gz export compresses at level 9,
            # which took most of the export time (e.g. 5.1 s of a 0.9 MB trace's export)
            prof.export_chrome_trace(raw)
            t2 = time.time()
            import gzip
            import shutil

            with open(raw, "rb") as fin, gzip.open(tmp, "wb", compresslevel=1) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
            os.remove(raw)
            os.replace(tmp, path)
            self.trace_written = self.trace_name
            t3 = time.time()
            self.event("trace", file=self.trace_name, steps=self.recorded, complete=complete,
                       export_s=round(t3 - t0, 3), stop_s=round(t1 - t0, 3), save_s=round(t2 - t1, 3),
                       compress_s=round(t3 - t2, 3))

    # ---------------------------------------------------------------- exceptions and exit
    def _record_exception(self, exc_type, exc, tb, thread=None):
        if exc_type is None or issubclass(exc_type, SystemExit):
            return
        self.exceptions += 1
        is_oom = (exc_type.__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower())
        tail = traceback.format_exception(exc_type, exc, tb)
        self.event("exception", step=self.steps, type=f"{exc_type.__module__}.{exc_type.__qualname__}",
                   message=str(exc)[:4000], oom=is_oom, uncaught=True, thread=thread,
                   traceback="".join(tail)[-6000:])
        if is_oom and id(exc) not in self.seen_exc:
            self.seen_exc.add(id(exc))
            self.ooms += 1
            self.event("oom", step=self.steps, type=exc_type.__name__, message=str(exc)[:2000], caught=False)

    def _excepthook(self, exc_type, exc, tb):
        try:
            self._record_exception(exc_type, exc, tb)
            self.exit_code = 1
            self.exit_reason = f"uncaught {exc_type.__name__}"
            self.finalize("uncaught exception")
        except Exception:  # noqa: BLE001
            pass
        self._orig_excepthook(exc_type, exc, tb)

    def _thread_excepthook(self, args):
        try:
            self._record_exception(args.exc_type, args.exc_value, args.exc_traceback,
                                   thread=getattr(args.thread, "name", None))
        except Exception:  # noqa: BLE001
            pass
        self._orig_thread_hook(args)

    def _sys_exit(self, code=None):
        if not self.stop_requested:
            self.exit_code = code if isinstance(code, int) else (0 if code is None else 1)
            self.exit_reason = "sys.exit"
        return self._orig_exit(code)

    def _atexit(self):
        if self.exit_code is None:
            self.exit_code = 0
            self.exit_reason = self.exit_reason or "end of program"
        self.finalize("exit")

    def finalize(self, why: str) -> None:
        """Flush whatever exists: the trace of a window cut short, the settings, the exit."""
        if os.getpid() != self.pid:
            return
        with self.lock:
            if self.finalized:
                return
            self.finalized = True
        try:
            if self.prof is not None:
                self._stop_profiler(complete=False)
        except Exception as exc:  # noqa: BLE001
            self.internal_error("flushing the trace", exc)
        try:
            self.write_settings()
        except Exception as exc:  # noqa: BLE001
            self.internal_error("settings", exc)
        if getattr(self, "hang", None) is not None:
            self.hang.flush()
        self.event("exit", code=self.exit_code, reason=self.exit_reason or why, steps_completed=self.steps)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass

    def _watchdog(self):
        """After a peer rank stopped at the end of its window, a rank that makes no progress
        is stuck in a collective the peer will never join (ranks disagree on the step
        count).  Record it and end, rather than hang until the collective timeout."""
        peers_dir = os.path.join(self.bundle, "ranks")
        while not self.finalized:
            time.sleep(1.0)
            if self.stop_requested or self.keep_going:
                continue
            try:
                done = [d for d in os.listdir(peers_dir)
                        if d != f"rank{self.rank}" and os.path.exists(os.path.join(peers_dir, d, ".window_done"))]
            except OSError:
                continue
            if not done:
                continue
            typical = sorted(self.step_times[-20:])[len(self.step_times[-20:]) // 2] if self.step_times else 1.0
            idle = time.time() - self.last_step_time
            if idle > max(float(self.env.get("DDPDOCTOR_STUCK_S", "15")), 10 * typical) and self._main_in_collective():
                self.event("stuck_after_peer_stop", step=self.steps, peers_done=sorted(done), idle_s=round(idle, 1),
                           message="no step progress since a peer rank finished its profiled window: this rank waits "
                                   "for a collective the peer never joins (ranks ran different numbers of steps)")
                self.exit_code = 1
                self.exit_reason = "stuck after peer stop"
                self.finalize("stuck")
                os._exit(1)

    @staticmethod
    def _main_in_collective() -> bool:
        """The main thread is inside torch.distributed / DDP / autograd's backward (where DDP
        all-reduces), not in the script's own code (a long evaluation is not a hang)."""
        frame = sys._current_frames().get(threading.main_thread().ident)
        for _ in range(3):
            if frame is None:
                return False
            name = frame.f_code.co_filename.replace(os.sep, "/")
            if "/torch/distributed/" in name or "/torch/nn/parallel/" in name or "/torch/autograd/" in name:
                return True
            frame = frame.f_back
        return False

    # ---------------------------------------------------------------- settings
    def write_settings(self, lite: bool = False) -> None:
        data = self.collect_settings(lite)
        path = os.path.join(self.dir, "settings.json")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, default=str)
        os.replace(tmp, path)

    def collect_settings(self, lite: bool = False) -> dict:
        """Everything settings.json holds.  ``lite``: from another thread while the main
        thread may be blocked inside torch — use only cached values, call nothing in torch."""
        torch = None if lite else (self.torch or sys.modules.get("torch"))
        env = os.environ
        d: dict = {
            "schema": SETTINGS_SCHEMA,
            "rank": self.rank, "local_rank": self.local_rank, "world_size": self.world_size,
            "local_world_size": _env_int(env, "LOCAL_WORLD_SIZE"),
            "node_rank": _env_int(env, "GROUP_RANK"), "nnodes": _env_int(env, "GROUP_WORLD_SIZE"),
            "hostname": socket.gethostname(), "pid": self.pid,
            "python": sys.version.split()[0],
            "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "torch_version": getattr(torch, "__version__", None) if torch else None,
            "steps_completed": self.steps,
            "step_source": self.step_source,
            "window": {"warmup": self.warmup, "active": self.active, "recorded_steps": self.recorded,
                       "first_step": self.first_step,
                       "trace": self.trace_written, "complete": self.window_done and self.recorded >= self.active},
            "exit": {"code": self.exit_code, "reason": self.exit_reason},
            "exceptions": self.exceptions, "ooms": self.ooms, "user_profiler": self.user_profiler,
            "step_time_s": _step_stats(self.step_times[1:] if self.steps <= 100 else self.step_times),
            "compiled": self.compiled,
        }
        main = None
        if self.loaders:
            main = max(self.loaders, key=lambda x: x[1].get("batches", 0))[1]
        d["dataloader"] = dict(main, set_epoch_called=self.set_epoch_called) if main else None
        d["dataloaders"] = [info for _r, info in self.loaders]
        if self.trial is not None:
            d["trial"] = self.trial
        d["optimizer"] = self.optimizer_info
        # the model may be gone at exit: keep what was seen while it was alive
        ddp = self.ddp_ref() if self.ddp_ref and not lite else None
        params = []
        if ddp is not None:
            try:
                self._ddp_cache = _ddp_settings(ddp, torch)
                params = [p for p in ddp.module.parameters()]
                mod = ddp.module
                if type(mod).__name__ == "OptimizedModule" or hasattr(mod, "_orig_mod"):
                    self.compiled = True
            except Exception as exc:  # noqa: BLE001
                self.internal_error("ddp settings", exc)
        elif not lite and self.first_optimizer is not None and self.first_optimizer() is not None:
            params = [p for g in self.first_optimizer().param_groups for p in g["params"]]
        d["compiled"] = self.compiled
        d["framework"] = self.framework_seen or _framework_from_modules(sys.modules, ddp)
        d["train"] = _accumulation(self.micro_per_step, self.synced_per_step)
        d["fsdp"] = self.fsdp_info
        d["ddp"] = getattr(self, "_ddp_cache", None) or {"used": self.ddp_ref is not None}
        dist = {}
        if torch is not None:
            try:
                import torch.distributed as tdist

                if tdist.is_available() and tdist.is_initialized():
                    dist = {"backend": str(tdist.get_backend()), "world_size": tdist.get_world_size(),
                            "rank": tdist.get_rank()}
                    # a rank started before its launcher set WORLD_SIZE (Lightning's rank 0) learns it here
                    if dist["world_size"] > d["world_size"]:
                        d["world_size"] = self.world_size = dist["world_size"]
            except Exception:  # noqa: BLE001
                pass
        d["distributed"] = dist or None
        if params:
            self._param_dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
        d["precision"] = _precision(torch, getattr(self, "_param_dtypes", []), self.autocast, self.grad_scaler)
        d["memory"] = _memory(torch)
        d["evidence"] = self.evidence.record()
        d["nccl_version"] = _nccl_version(torch)
        cache = self.__dict__.setdefault("_torch_cache", {})
        for key in ("distributed", "memory", "nccl_version", "precision"):
            if lite:
                d[key] = cache.get(key, d[key])
            elif d[key] is not None:
                cache[key] = d[key]
        if lite:
            d["settings_note"] = "written by the signal watcher while the main thread was blocked: values cached earlier"
        return d

