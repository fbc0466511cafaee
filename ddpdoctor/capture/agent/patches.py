"""Part of the capture agent (standard library only): every torch patch in
one table, applied by one wrapper helper when the user's program imports the module.

An entry names the module, the patched object (``Class.attribute`` or a module function) and what
runs around the original, each a dotted name resolved on the agent (``settings.loader_iter`` is
``agent.settings.loader_iter``):

- ``args(orig, args, kwargs) -> (args, kwargs)``: the call's arguments, changed before the call
  (``run --try``: DataLoader and DDP arguments at construction, overrides.py);
- ``before(*args, **kwargs)`` / ``after(result, *args, **kwargs)``: hooks around the original call;
- ``around(*args, **kwargs) -> context manager or None``: the original call runs inside it (a
  profiler span of ddpdoctor's own, ``DataLoader.__iter__`` while the window records);
- ``register``: a torch registration function called with the hook (the optimizer step post hook);
- ``on_import``: called with the module itself.

A hook's exception is reported (``agent.internal_error``: a ``ddpdoctor_error`` event and a count
in ``agent_errors``) and never reaches the user's program; ``SystemExit`` (the agent ending the rank
after the window) and ``KeyboardInterrupt`` pass.  ``when`` makes an entry conditional; ``optional``
entries are skipped quietly where the torch version lacks them.
"""

from __future__ import annotations

import sys
from typing import NamedTuple


class Patch(NamedTuple):
    module: str
    target: str = ""
    before: str | None = None
    after: str | None = None
    args: str | None = None
    around: str | None = None
    register: str | None = None
    on_import: str | None = None
    when: str | None = None
    optional: bool = False


# torch.compiler.is_compiling, once the script calls torch.compile (``set_compile_check``): a patched call that
# Dynamo traces (a torch.compile'd DDP model) runs only the original. Traced hooks would put the
# agent's own state into the graph's guards (measured on torch 2.13: a guard on the window flag made
# the window's start recompile the model) and break the graph at ``time.time``.
_IS_COMPILING = [None]


def set_compile_check(fn) -> None:
    _IS_COMPILING[0] = fn if callable(fn) else None


def _compiling() -> bool:
    check = _IS_COMPILING[0]
    return check is not None and bool(check())


_DDP, _LOADER, _FSDP1 = (
    "torch.nn.parallel.distributed",
    "torch.utils.data.dataloader",
    "torch.distributed.fsdp.fully_sharded_data_parallel",
)

PATCHES = (
    Patch("torch", on_import="torch_imported"),
    Patch("torch", "OutOfMemoryError.__init__", after="settings.oom_created", optional=True),
    Patch("torch", "compile", before="compile_called", optional=True),
    Patch("torch.optim.optimizer", "register_optimizer_step_post_hook", register="optimizer_stepped"),
    # before torch.distributed re-exports it (the wrapper is installed when distributed_c10d finishes importing)
    Patch(
        "torch.distributed.distributed_c10d",
        "init_process_group",
        before="settings.init_called",
        after="process_group_joined",  # this process is a rank of that group from now on (membership.py)
    ),
    Patch(_DDP, "DistributedDataParallel.__init__", args="tried_ddp", after="ddp_created"),
    Patch(_DDP, "DistributedDataParallel.forward", before="ddp_forward", after="settings.ddp_output"),
    Patch(_LOADER, "DataLoader.__init__", args="tried_dataloader", when="tries_dataloader"),
    Patch(_LOADER, "DataLoader.__iter__", around="loader_iter_span"),
    Patch(_LOADER, "_BaseDataLoaderIter.__init__", after="settings.loader_iter"),
    Patch(_LOADER, "_BaseDataLoaderIter.__next__", before="loader_next", after="batch_returned"),
    # runs in a fork-start worker, whose hooks go to a join.Pending: its WorkerProbe (loader_workers.py)
    Patch("torch.utils.data._utils.worker", "_worker_loop", args="loader_worker_args"),
    Patch("torch.utils.data.distributed", "DistributedSampler.set_epoch", before="settings.set_epoch"),
    Patch("torch.amp.autocast_mode", "autocast.__enter__", before="settings.autocast_entered"),
    Patch("torch.amp.grad_scaler", "GradScaler.__init__", after="settings.scaler_created"),
    Patch("torch.profiler.profiler", "_KinetoProfile.prepare_trace", before="profiler_prepared"),
    Patch(_FSDP1, "FullyShardedDataParallel.__init__", after="settings.fsdp1_created"),
    Patch(_FSDP1, "FullyShardedDataParallel.forward", before="fsdp_forward"),
    Patch("torch.distributed.fsdp", "fully_shard", after="settings.fsdp2_created", optional=True),
)
MODULES = tuple(dict.fromkeys(p.module for p in PATCHES))
_COPIED = ("__module__", "__name__", "__qualname__", "__doc__")


def resolve(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def wrap(owner, attr: str, *, args=None, before=None, after=None, around=None, on_error=None, place: str = ""):
    """Replace ``owner.attr`` by a wrapper that runs the hooks around the original; the hooks'
    exceptions go to ``on_error(place, exc)``.  Returns the wrapper, or None when ``owner.attr``
    is already a ddpdoctor wrapper."""
    orig = getattr(owner, attr)
    if getattr(orig, "_ddpdoctor", False):
        return None

    def wrapper(*a, **k):
        if _compiling():  # traced by Dynamo: the hooks stay out of the compiled graph
            return orig(*a, **k)
        if args is not None:
            try:
                a, k = args(orig, a, k)
            except Exception as exc:  # the call goes on with its own arguments
                on_error(f"{place} arguments", exc)
        if before is not None:
            try:
                before(*a, **k)
            except Exception as exc:
                on_error(f"{place} before", exc)
        span = None
        if around is not None:
            try:
                span = around(*a, **k)
                if span is not None:
                    span.__enter__()
            except Exception as exc:  # the call goes on outside the span
                span = None
                on_error(f"{place} around", exc)
        try:
            result = orig(*a, **k)
        finally:
            if span is not None:
                try:
                    span.__exit__(None, None, None)
                except Exception as exc:
                    on_error(f"{place} around", exc)
        if after is not None:
            try:
                after(result, *a, **k)
            except Exception as exc:
                on_error(f"{place} after", exc)
        return result

    for name in _COPIED:
        try:
            setattr(wrapper, name, getattr(orig, name))
        except (AttributeError, TypeError):
            pass  # a builtin slot without the attribute: the wrapper's own is kept
    try:  # attributes hung on the function (torch 2.13: fully_shard.state)
        wrapper.__dict__.update({k: v for k, v in vars(orig).items() if k not in ("__wrapped__", "_ddpdoctor")})
    except TypeError:  # a builtin without __dict__
        pass
    wrapper.__wrapped__, wrapper._ddpdoctor = orig, True
    setattr(owner, attr, wrapper)
    return wrapper


class Router:
    """Where the patched calls' hooks go: the process's agent, resolved at every call.  A forked child
    (``multiprocessing.Process``, a fork-start DataLoader worker) inherits the wrappers: it points them at
    its own ``join.Pending`` and, once it joins a process group, at its own agent.  A hook the target does
    not have is skipped (a process that is not a rank runs only the join hook)."""

    def __init__(self, agent):
        self.agent = agent
        self.registered: set[str] = set()  # registrations happen once per process tree, not per agent

    def hook(self, name: str | None, kind: str):
        if not name:
            return None
        parts = name.split(".")
        resolved = [self, None]  # (the target it was resolved on, the bound hook or None): one walk per target

        def call(*a, **k):
            target = self.agent
            if target is not resolved[0]:
                fn = target
                try:
                    for part in parts:
                        fn = getattr(fn, part)
                except AttributeError:
                    fn = None
                resolved[0], resolved[1] = target, fn
            fn = resolved[1]
            if fn is None:
                return (a[1], a[2]) if kind == "args" else None
            return fn(*a, **k)

        return call

    def internal_error(self, place: str, exc: BaseException) -> None:
        report = getattr(self.agent, "internal_error", None)
        if report is not None:
            report(place, exc)


def apply(router: Router, name: str, module, table=None) -> None:
    """Every entry of module ``name``; one entry failing leaves the others in place."""
    if not isinstance(router, Router):  # an agent: its hooks, resolved at each call
        router = Router(router)
    for p in PATCHES if table is None else table:
        if p.module != name:
            continue
        try:
            if p.when is None or resolve(router.agent, p.when)():
                _apply_one(router, p, module)
        except Exception as exc:
            router.internal_error(f"patching {name}{' ' + p.target if p.target else ''}", exc)


def _apply_one(router: Router, p: Patch, module) -> None:
    if p.on_import:
        resolve(router.agent, p.on_import)(module)
        return
    owner_path, _, attr = p.target.rpartition(".")
    try:
        owner = resolve(module, owner_path) if owner_path else module
        getattr(owner, attr)
    except AttributeError:
        if p.optional:
            return
        raise
    if p.register:
        if p.target not in router.registered:
            router.registered.add(p.target)
            getattr(owner, attr)(router.hook(p.register, "register"))
        return
    wrap(
        owner,
        attr,
        args=router.hook(p.args, "args"),
        before=router.hook(p.before, "before"),
        after=router.hook(p.after, "after"),
        around=router.hook(p.around, "around"),
        on_error=router.internal_error,
        place=p.target,
    )


class PostImportFinder:
    """Runs ``callback(name, module)`` right after one of the named modules has been executed."""

    def __init__(self, names, callback, errors=None):
        self.names = frozenset(names)
        self.callback = callback
        self.errors = errors
        self._busy = set()

    def find_spec(self, name, path=None, target=None):
        if name not in self.names or name in self._busy:
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
        except Exception as exc:  # the import goes on without the patch
            spec = None
            if self.errors is not None:
                self.errors.count(f"import hook {name}", exc)
        finally:
            self._busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader = spec.loader
        orig_exec = loader.exec_module
        callback = self.callback

        def exec_module(module):
            orig_exec(module)
            callback(name, module)

        loader.exec_module = exec_module  # this loader instance belongs to this one spec
        return spec


def install(agent, table=None) -> PostImportFinder:
    """The import hook for every module in the table, and the patches of those already imported.  When
    this process already has the table's hook (a forked child that became a rank), it is pointed at
    ``agent`` instead: the wrappers are in place, a second set would run every hook twice."""
    table = PATCHES if table is None else table
    for finder in sys.meta_path:
        if isinstance(finder, PostImportFinder) and getattr(finder, "table", None) is table:
            finder.router.agent = agent
            _apply_imported(finder.router, table)
            return finder
    router = Router(agent)
    names = tuple(dict.fromkeys(p.module for p in table))
    finder = PostImportFinder(names, lambda name, module: apply(router, name, module, table), agent.errors)
    finder.router, finder.table = router, table
    sys.meta_path.insert(0, finder)
    _apply_imported(router, table)
    return finder


def _apply_imported(router: Router, table) -> None:
    for name in dict.fromkeys(p.module for p in table):  # modules imported before the agent: patch now
        if name in sys.modules:
            apply(router, name, sys.modules[name], table)


def retarget(target) -> None:
    """Point every hook of this process at ``target`` (a forked child's ``join.Pending``, then its agent)."""
    for finder in sys.meta_path:
        router = getattr(finder, "router", None)
        if isinstance(finder, PostImportFinder) and router is not None:
            router.agent = target
