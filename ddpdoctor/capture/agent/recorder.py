"""Part of the capture agent: what the torch hooks see of the user's objects
(DataLoaders, the DDP / FSDP model, the optimizer, autocast, GradScaler, torch.compile, OOMs and
exceptions), and ``settings.json`` built from it (its fields are declared in ``contract.py``).  The readers that turn a torch object into plain
values are in ``settings.py`` (passed in, like the agent's other parts); torch is never imported
here, only the module the script imported is used.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import traceback
import weakref

from . import config_costs, contract

SETTINGS_SCHEMA = contract.SETTINGS_SCHEMA
_HERE = os.path.dirname(os.path.abspath(__file__))


class SettingsRecorder:
    def __init__(self, agent, readers, env_int):
        self.agent = agent
        self.r = readers  # settings.py
        self.env_int = env_int  # process.env_int
        self.loaders = []  # [(weakref, info dict)]
        self.set_epoch_called = False
        self.autocast = set()  # (device_type, dtype)
        self.grad_scaler = False
        self.compiled = False
        self.exceptions = 0
        self.ooms = 0
        self.seen_exc = set()  # ids of exceptions already recorded
        self.ddp_ref = None
        self.ddp_cache = None
        self.fsdp_info = None
        self.fsdp_root = None
        self.first_optimizer = None
        self.optimizer_info = None
        self.framework_seen = None  # from the call stack at the first optimizer step
        self.param_dtypes = []
        self.autograd = None  # anomaly mode when the window started (window_autograd)
        self.init_call = None  # the arguments the script passed to init_process_group
        self.graph_nodes = None  # autograd nodes of one DDP forward, counted while anomaly mode is on
        self.float64_slowdown = None  # float64 / float32 matmul time of the model's largest float64 weight
        self.torch_cache = {}  # torch-derived values, for the lite write from another thread
        self.contract_breach_told = False

    # ---------------------------------------------------------------- hooks (patches.PATCHES)
    def compile_called(self, *args, **kwargs) -> None:
        self.compiled = True

    def set_epoch(self, *args, **kwargs) -> None:
        self.set_epoch_called = True

    def autocast_entered(self, ac, *args, **kwargs) -> None:
        with self.agent.errors.quiet("autocast settings"):
            if getattr(ac, "_enabled", True):
                self.autocast.add((str(getattr(ac, "device", "")), str(getattr(ac, "fast_dtype", ""))))

    def scaler_created(self, _result, scaler, *args, **kwargs) -> None:
        self.grad_scaler = bool(getattr(scaler, "_enabled", True))

    def window_autograd(self, torch, measure: bool = False) -> None:
        with self.agent.errors.quiet("autograd settings"):
            self.autograd = self.r._autograd_settings(torch)
            if measure and self.autograd["anomaly_enabled"]:
                nodes, frames = self.graph_nodes or (0, 0)
                cost = config_costs.anomaly_cost(torch, frames / nodes if nodes else None)
                self.autograd["anomaly_us_per_node"] = cost["us_per_node"]
                self.autograd["anomaly_timed_frames"] = cost["frames"]
        self._put_graph()

    def _put_graph(self) -> None:
        if self.autograd is not None and self.graph_nodes is not None:
            self.autograd["graph_nodes_per_forward"], self.autograd["graph_frames_per_forward"] = self.graph_nodes

    def ddp_output(self, result, *args, **kwargs) -> None:
        """The first DDP forward run with anomaly mode on: the nodes of its graph (what anomaly mode adds to)."""
        torch = self.agent.torch or sys.modules.get("torch")
        if self.graph_nodes is None and torch is not None and torch.is_anomaly_enabled():
            self.graph_nodes = config_costs.graph_nodes(result)
            self._put_graph()

    def init_called(self, *args, **kwargs) -> None:
        """init_process_group(...): the world size and rank the script passed, beside the launcher's."""
        self.init_call = self.r._init_call(args, kwargs, os.environ)
        self.agent.event("init_process_group", step=self.agent.steps, **self.init_call)

    def fsdp1_created(self, _result, fsdp, *args, **kwargs) -> None:
        self._fsdp_created("fsdp1", fsdp, kwargs)

    def fsdp2_created(self, _result, module, *args, **kwargs) -> None:
        self._fsdp_created("fsdp2", module, kwargs)

    def _fsdp_created(self, kind, module, kwargs) -> None:
        """The last FSDP wrap is the outermost (wrapping goes bottom-up): its settings are the
        job's; the count says how many modules were wrapped."""
        wraps = (self.fsdp_info or {}).get("wrapped_modules", 0) + 1
        self.fsdp_info = dict(self.r._fsdp_settings(kind, module, kwargs), wrapped_modules=wraps)
        if wraps == 1:
            self.agent.event("fsdp", kind=kind, step=self.agent.steps)

    def is_fsdp_root(self, fsdp) -> bool:
        """FSDP1: the root's forward is one micro-batch (nested FSDP units forward inside it)."""
        if self.fsdp_root is None:
            self.fsdp_root = weakref.ref(fsdp)
        return self.fsdp_root() is fsdp

    def measure_float64(self, ddp) -> None:
        """At DDP construction, before training: how much slower the model's float64 arithmetic is here."""
        torch = self.agent.torch or sys.modules.get("torch")
        with self.agent.errors.quiet("float64 timing"):
            self.float64_slowdown = config_costs.float64_slowdown(torch, list(ddp.module.parameters()))

    def ddp_seen(self, ddp) -> bool:
        """True the first time a DDP model is seen (its settings are the job's)."""
        if self.ddp_ref is not None:
            return False
        self.ddp_ref = weakref.ref(ddp)
        return True

    def optimizer_seen(self, optimizer) -> bool:
        """True when this is the first optimizer that stepped (the one whose steps count)."""
        if self.first_optimizer is None:
            self.first_optimizer = weakref.ref(optimizer)
            self.optimizer_info = self.r._optimizer_settings(optimizer)
            self.framework_seen = self.r._framework_from_stack(sys._getframe(2)) or self.framework_seen
            return True
        return self.first_optimizer() is optimizer

    def loader_iter(self, _result, it, loader, *args, **kwargs) -> None:
        for ref, info in self.loaders:
            if ref() is loader:
                info["iterations"] += 1
                it._ddpdoctor_info = info
                self.agent.loader_timing.iterator_created(it)
                return
        info = {"iterations": 1, "batches": 0}
        try:
            info.update(self.r._loader_settings(loader))
        except Exception as exc:
            self.agent.internal_error("dataloader settings", exc)
        self.agent._evidence_hook("loader_created", info, loader)
        self.agent.loader_timing.iterator_created(it)
        self.agent.dataset_content(info, loader)
        self.loaders.append((weakref.ref(loader), info))
        it._ddpdoctor_info = info

    # ---------------------------------------------------------------- OOMs and exceptions
    def oom_created(self, _result, exc, *args, **kwargs) -> None:
        if id(exc) in self.seen_exc:
            return
        self.seen_exc.add(id(exc))
        self.ooms += 1
        msg = str(args[0]) if args else ""
        frame = sys._getframe(1)
        while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _HERE:
            frame = frame.f_back  # the agent's own frames (the wrapper): up to who raised
        # None when C++ code raised it outside any Python frame
        where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}" if frame is not None else None
        self.agent.event(
            "oom", step=self.agent.steps, type=type(exc).__name__, message=msg[:2000], where=where, caught=None
        )

    def record_exception(self, exc_type, exc, tb, thread=None) -> None:
        if exc_type is None or issubclass(exc_type, SystemExit):
            return
        self.exceptions += 1
        is_oom = exc_type.__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()
        tail = traceback.format_exception(exc_type, exc, tb)
        a = self.agent
        a.event(
            "exception",
            step=a.steps,
            type=f"{exc_type.__module__}.{exc_type.__qualname__}",
            message=str(exc)[:4000],
            oom=is_oom,
            uncaught=True,
            thread=thread,
            traceback="".join(tail)[-6000:],
        )
        if is_oom and id(exc) not in self.seen_exc:
            self.seen_exc.add(id(exc))
            self.ooms += 1
            a.event("oom", step=a.steps, type=exc_type.__name__, message=str(exc)[:2000], caught=False)

    # ---------------------------------------------------------------- settings.json
    def write(self, lite: bool = False) -> None:
        data = self.collect(lite)
        path = os.path.join(self.agent.dir, "settings.json")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, default=str)
        os.replace(tmp, path)

    def collect(self, lite: bool = False) -> dict:
        """Everything settings.json holds.  ``lite``: from another thread while the main
        thread may be blocked inside torch -- use only cached values, call nothing in torch."""
        a, w, r = self.agent, self.agent.window, self.r
        torch = None if lite else (a.torch or sys.modules.get("torch"))
        env = os.environ
        d: dict = {
            "schema": SETTINGS_SCHEMA,
            "rank": a.rank,
            "local_rank": a.local_rank,
            "world_size": a.world_size,
            "local_world_size": self.env_int(env, "LOCAL_WORLD_SIZE"),
            "node_rank": self.env_int(env, "GROUP_RANK"),
            "nnodes": self.env_int(env, "GROUP_WORLD_SIZE"),
            "hostname": socket.gethostname(),
            "pid": a.pid,
            "launcher": a.launcher_name(),
            "process_groups_joined": a.joins,
            "window_process_group": a.window_group,
            "python": sys.version.split()[0],
            "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "torch_version": getattr(torch, "__version__", None) if torch else None,
            "steps_completed": w.steps,
            "step_source": w.step_source,
            "window": {
                "warmup": w.warmup,
                "active": w.active,
                "requested_active": w.requested_active,
                "active_decided_by": w.active_decided_by,
                "cut_by_script_end": w.cut_by_script_end,
                "recorded_steps": w.recorded,
                "first_step": w.first_step,
                "trace": a.profiler.trace_written,
                "complete": w.complete,
                "marked_by_script": w.manual,
                "steady": w.steady,
            },
            "exit": {"code": a.life.exit_code, "reason": a.life.exit_reason},
            "exceptions": self.exceptions,
            "ooms": self.ooms,
            "user_profiler": w.user_profiler,
            "step_time_s": r._step_stats(w.step_time_values()),
            "compiled": self.compiled,
        }
        main = max(self.loaders, key=lambda x: x[1].get("batches", 0))[1] if self.loaders else None
        d["dataloader"] = dict(main, set_epoch_called=self.set_epoch_called) if main else None
        d["dataloaders"] = [info for _r, info in self.loaders]
        if a.trial is not None:
            d["trial"] = a.trial
        d["optimizer"] = self.optimizer_info
        # the model may be gone at exit: keep what was seen while it was alive
        ddp = self.ddp_ref() if self.ddp_ref and not lite else None
        params = []
        if ddp is not None:
            try:
                self.ddp_cache = r._ddp_settings(ddp, torch, errors=a.errors)
                params = [p for p in ddp.module.parameters()]
                mod = ddp.module
                if type(mod).__name__ == "OptimizedModule" or hasattr(mod, "_orig_mod"):
                    self.compiled = True
            except Exception as exc:
                a.internal_error("ddp settings", exc)
        elif not lite and self.first_optimizer is not None and self.first_optimizer() is not None:
            params = [p for g in self.first_optimizer().param_groups for p in g["params"]]
        d["compiled"] = self.compiled
        d["framework"] = self.framework_seen or r._framework_from_modules(sys.modules, ddp)
        d["train"] = r._accumulation(w.micro_per_step, w.synced_per_step)
        d["fsdp"] = self.fsdp_info
        if self.ddp_cache and self.float64_slowdown is not None:
            self.ddp_cache["float64_slowdown"] = self.float64_slowdown
        d["ddp"] = self.ddp_cache or {"used": self.ddp_ref is not None}
        d["distributed"] = self._distributed(torch, d) or None
        if params:
            self.param_dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
        d["precision"] = r._precision(torch, self.param_dtypes, self.autocast, self.grad_scaler, errors=a.errors)
        d["memory"] = r._memory(torch, errors=a.errors)
        if self.autograd is None and torch is not None:
            self.window_autograd(torch)  # no window started (a run cut short): the mode at exit
        d["autograd"] = self.autograd
        d["init_process_group"] = self.init_call
        d["evidence"] = a.evidence.record()
        d["compile"] = a.compile_watch.record()  # compile.py: None until the window ends
        d["loader_window"] = a.loader_timing.record()
        d["nccl_version"] = r._nccl_version(torch, errors=a.errors)
        for key in ("distributed", "memory", "nccl_version", "precision"):
            if lite or (key == "distributed" and d[key] is None):
                # lite: torch must not be called; distributed: the group was destroyed at exit (after
                # the window the ranks leave it together, lifecycle.py) -- its values as seen alive
                d[key] = self.torch_cache.get(key, d[key])
            elif d[key] is not None:
                self.torch_cache[key] = d[key]
        if lite:
            d["settings_note"] = (
                "written by the signal watcher while the main thread was blocked: values cached earlier"
            )
        self._check_contract(d)
        d["agent_errors"] = a.errors.record()
        return d

    def _check_contract(self, d: dict) -> None:
        """A field contract.py does not declare is written all the same and told once, as a capture error."""
        undeclared = contract.undeclared_settings(d)
        if undeclared and not self.contract_breach_told:
            self.contract_breach_told = True
            self.agent.internal_error(
                "settings.json fields missing from contract.py", ValueError(", ".join(undeclared))
            )

    def _distributed(self, torch, d: dict) -> dict:
        if torch is None:
            return {}
        with self.agent.errors.quiet("distributed settings"):
            import torch.distributed as tdist

            if tdist.is_available() and tdist.is_initialized():
                dist = {
                    "backend": str(tdist.get_backend()),
                    "world_size": tdist.get_world_size(),
                    "rank": tdist.get_rank(),
                }
                # a rank started before its launcher set WORLD_SIZE (Lightning's rank 0) learns it here
                if dist["world_size"] > d["world_size"]:
                    d["world_size"] = self.agent.world_size = dist["world_size"]
                return dist
        return {}
