"""Part of the capture agent: a light sampler of the training
thread's Python stack, run by ``evidence.py``'s window thread during the profiled
window only.

Each sample walks the training thread's frames (``sys._current_frames()``) from the
innermost outwards and keeps one signature, never the raw stack:
- the innermost frame of *user code* (the script and its own modules; the training loops of
  transformers / accelerate / lightning count as user code, since that is where their users'
  loops run): ``func (file.py:LINE)``, the file relative to the script's folder;
- the library function that frame called, by its public name where one exists
  (``torch.save``, ``torch.Tensor.backward``);
- whether the library frames under it are in torch.distributed / DDP / autograd (``sync``:
  where a rank waits for its peers, so never "extra work");
- the loop phase the agent was in (``loader`` / ``input`` / ``step``), or ``compile`` when a
  frame under it is torch.compile compiling (Dynamo tracing a frame, AOT autograd / Inductor
  compiling a graph, a lazy backward compile): compilation is neither input work nor the step's
  own compute, whichever loop phase it happens in (``COMPILE_MODULES``, ``COMPILE_FUNCTIONS``).
Counts per signature are turned into ms per step when the window ends (``aggregate``, pure).
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig

TOP_SIGNATURES = 30
TOP_FUNCTIONS = 100
TOP_INPUT = 5
# packages whose training loops are where their users' loops run: treated as user code
LOOP_PACKAGES = frozenset({"transformers", "accelerate", "lightning", "pytorch_lightning", "lightning_fabric"})
# library modules where a rank waits for its peers (collectives, DDP, autograd's backward, where
# DDP all-reduces); not torch.autograd.profiler (record_function is everywhere)
SYNC_PACKAGES = ("torch.distributed", "torch.nn.parallel")
SYNC_MODULES = frozenset({"torch.autograd", "torch.autograd.graph"})
# nn.Module call plumbing: skipped, so the call is named by the module's own forward
PLUMBING = {("torch.nn.modules.module", "_wrapped_call_impl"), ("torch.nn.modules.module", "_call_impl")}

USER, LIB, SYNC, SKIP, SKIP_SYNC = "user", "lib", "sync", "skip", "skip_sync"
# torch.compile compiling (measured on torch 2.13: every Dynamo frame compilation runs under
# convert_frame, AOT autograd's lazy backward compile under get_or_compile, which returns at once
# when the backward is compiled); a compiled graph *running* is under eval_frame / runtime_wrappers
COMPILE_MODULES = (
    "torch._dynamo.convert_frame",
    "torch._inductor.compile_fx",
    "torch._inductor.codecache",
    "torch._inductor.async_compile",
)
COMPILE_FUNCTIONS = frozenset({("torch._functorch._aot_autograd.runtime_wrappers", "get_or_compile")})
COMPILE_PHASE = "compile"


def _library_roots() -> tuple[str, ...]:
    roots = set()
    try:
        paths = sysconfig.get_paths()
        roots.update(paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    except Exception:
        pass
    try:
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except Exception:
        pass
    return tuple(sorted(os.path.join(os.path.abspath(r), "") for r in roots if r))


class StackSampler:
    def __init__(self, thread_id: int, interval: float, script_dir: str | None, agent_dir: str, phase_of):
        self.thread_id = thread_id
        self.interval = interval
        self.script_dir = os.path.join(script_dir, "") if script_dir else None
        self.agent_dir = os.path.join(agent_dir, "")
        self.phase_of = phase_of
        self.counts: dict[tuple, int] = {}
        self.samples = 0
        self.missed = 0
        self.cpu_s = None  # the sampler thread's CPU time over the window
        self.busy_s = 0.0  # time spent taking samples (holding the GIL)
        self.last = None  # the last sample's key (gil.Gaps: the frame before/after a gap)
        self.last_top = None  # its innermost frame's (code, last instruction): the call a gap ended in
        self._kinds: dict = {}  # code object -> (kind, module name, compiling)
        self._roots = _library_roots()

    # ---- the hot path (sampler thread, ~100 times a second)
    def sample(self) -> None:
        f = sys._current_frames().get(self.thread_id)
        if f is None:
            self.missed += 1
            return
        self.last_top = (f.f_code, f.f_lasti)
        phase = self.phase_of()
        kinds = self._kinds
        callee = None
        sync = False
        compiling = False
        while f is not None:
            code = f.f_code
            k = kinds.get(code)
            if k is None:
                k = kinds[code] = self._classify(code, f)
            kind = k[0]
            if kind is USER:
                break
            if k[2]:
                compiling = True
            if kind is SYNC or kind is SKIP_SYNC:
                sync = True
            if kind is LIB or kind is SYNC:
                callee = code
            f = f.f_back
        if compiling and phase != "capture":
            phase = COMPILE_PHASE
        key = (callee, f.f_code if f is not None else None, f.f_lineno if f is not None else 0, phase, sync)
        self.counts[key] = self.counts.get(key, 0) + 1
        self.samples += 1
        self.last = key

    def _classify(self, code, frame) -> tuple[str, str, bool]:
        """(kind, module name, whether the frame is torch.compile compiling)."""
        kind, mod = self._kind(code, frame)
        return kind, mod, mod.startswith(COMPILE_MODULES) or (mod, code.co_name) in COMPILE_FUNCTIONS

    def _kind(self, code, frame) -> tuple[str, str]:
        fn = code.co_filename.replace(os.sep, "/")
        mod = str(frame.f_globals.get("__name__") or "")
        top = mod.split(".", 1)[0]
        if fn.startswith(self.agent_dir) or mod.startswith("ddpdoctor_capture_agent"):
            return SKIP, mod
        if top in LOOP_PACKAGES:
            return USER, mod
        if (
            top == "torch"
            or fn.startswith("<")
            or "/site-packages/" in fn
            or "/dist-packages/" in fn
            or fn.startswith(self._roots)
        ):
            if (mod, code.co_name) in PLUMBING:
                return SKIP, mod
            sync = mod in SYNC_MODULES or mod.startswith(SYNC_PACKAGES)
            if "<locals>" in getattr(code, "co_qualname", ""):  # a decorator's wrapper: name what it wraps
                return (SKIP_SYNC if sync else SKIP), mod
            return (SYNC if sync else LIB), mod
        return USER, mod

    # ---- when the window ends
    def records(self) -> list[dict]:
        """The counts with code objects turned into names (no absolute paths)."""
        out = []
        names: dict = {}
        for (callee, user, line, phase, sync), n in list(self.counts.items()):
            lib = None
            if callee is not None:
                if callee not in names:
                    names[callee] = public_name(callee, self._kinds.get(callee, (None, ""))[1])
                lib = names[callee]
            if user is not None:
                func = _func_name(user)
                file = self.display_file(user.co_filename, self._kinds.get(user, (None, ""))[1])
            else:
                func, file = "(library)", ""
            out.append({"lib": lib, "func": func, "file": file, "line": line, "phase": phase, "sync": sync, "count": n})
        return out

    def place_of(self, key) -> dict | None:
        """One sample's key as a place ({lib, func, file, line}); None outside user code."""
        if key is None or key[1] is None:
            return None
        callee, user, line = key[0], key[1], key[2]
        lib = public_name(callee, self._kinds.get(callee, (None, ""))[1]) if callee is not None else None
        return {
            "lib": lib,
            "func": _func_name(user),
            "line": line,
            "file": self.display_file(user.co_filename, self._kinds.get(user, (None, ""))[1]),
        }

    def display_file(self, filename: str, module: str) -> str:
        fn = os.path.abspath(filename).replace(os.sep, "/") if not filename.startswith("<") else filename
        if self.script_dir and fn.startswith(self.script_dir.replace(os.sep, "/")):
            return fn[len(self.script_dir) :]
        for marker in ("/site-packages/", "/dist-packages/"):
            if marker in fn:
                return fn.rsplit(marker, 1)[1]
        return fn.rsplit("/", 1)[-1]

    def summary(self, wall_s: float, steps: int, forwards: int, starved_s: float = 0.0) -> dict:
        out = aggregate(self.records(), self.samples, wall_s, steps, forwards, starved_s)
        out.update(
            {
                "interval_s": self.interval,
                "missed": self.missed,
                "sampler_cpu_s": round(self.cpu_s, 6) if self.cpu_s is not None else None,
                "sampler_busy_s": round(self.busy_s, 6),
            }
        )
        return out


def _func_name(code) -> str:
    qual = getattr(code, "co_qualname", code.co_name)
    return code.co_name if "<locals>" in qual else qual


def _static_lookup(module, parts: list[str]):
    obj = vars(module).get(parts[0])
    for p in parts[1:]:
        if not isinstance(obj, type):
            return None
        obj = next((c.__dict__[p] for c in obj.__mro__ if p in c.__dict__), None)
    return obj


def _defines(obj, code) -> bool:
    for _ in range(8):
        if obj is None:
            return False
        for cand in (obj, getattr(obj, "__func__", None), getattr(obj, "fget", None)):
            if getattr(cand, "__code__", None) is code:
                return True
        obj = getattr(obj, "__wrapped__", None)
    return False


def public_name(code, module: str) -> str:
    """``torch.save`` for torch/serialization.py's save: the shortest package path that
    exposes the same function (looked up statically: no lazy imports triggered)."""
    qual = getattr(code, "co_qualname", code.co_name)
    if "<" in qual or not module:
        return f"{module}.{code.co_name}" if module else code.co_name
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        mod = sys.modules.get(name)
        if mod is None:
            continue
        try:
            if _defines(_static_lookup(mod, qual.split(".")), code):
                return f"{name}.{qual}"
        except Exception:
            continue
    return f"{module}.{qual}"


def where_text(rec: dict) -> str:
    place = f"{rec['func']} ({rec['file']}:{rec['line']})" if rec.get("file") else rec["func"]
    return f"{rec['lib']} in {place}" if rec.get("lib") else place


def aggregate(
    records: list[dict], samples: int, wall_s: float, steps: int, forwards: int, starved_s: float = 0.0
) -> dict:
    """Per-signature, per-function and per-phase time of one rank's window, in ms per step.

    ``records``: [{lib, func, file, line, phase, sync, count}]; every sample stands for
    (wall_s - starved_s) / samples of wall time: ``starved_s`` is the time the sampler could not run
    (GC, a call holding the GIL: gil.py), which no sample covers and which is reported apart."""
    if samples <= 0 or wall_s <= 0 or steps <= 0:
        return {"sampled": False, "samples": max(0, samples), "reason": "no samples in the window"}
    ms_per_sample = max(wall_s - max(0.0, starved_s), 0.1 * wall_s) * 1000.0 / samples

    def per_step(n: int) -> float:
        return round(n * ms_per_sample / steps, 3)

    sigs: dict[tuple, dict] = {}
    funcs: dict[tuple, dict] = {}
    phases: dict[str, int] = {}
    input_sigs: dict[tuple, int] = {}
    for r in records:
        phases[str(r["phase"])] = phases.get(str(r["phase"]), 0) + r["count"]
        if r["phase"] in ("capture", COMPILE_PHASE):
            continue  # ddpdoctor's own work at a step boundary; torch.compile compiling (compile.py)
        key = (r["lib"], r["func"], r["file"], r["line"], bool(r["sync"]))
        s = sigs.setdefault(
            key,
            {
                "where": where_text(r),
                "lib": r["lib"],
                "func": r["func"],
                "file": r["file"],
                "line": r["line"],
                "sync": bool(r["sync"]),
                "count": 0,
            },
        )
        s["count"] += r["count"]
        if r["phase"] == "input":
            input_sigs[key] = input_sigs.get(key, 0) + r["count"]
    for s in sigs.values():
        if s["sync"]:
            continue
        fkey = (s["func"], s["file"])
        f = funcs.setdefault(fkey, {"func": s["func"], "file": s["file"], "count": 0, "where": s["where"], "_top": 0})
        f["count"] += s["count"]
        if s["count"] > f["_top"]:
            f["_top"], f["where"] = s["count"], s["where"]
    sig_list = sorted(sigs.values(), key=lambda s: (-s["count"], s["where"]))
    for s in sig_list:
        s["ms_per_step"] = per_step(s["count"])
    func_list = sorted(funcs.values(), key=lambda f: (-f["count"], f["where"]))[:TOP_FUNCTIONS]
    for f in func_list:
        del f["_top"]
        f["ms_per_step"] = per_step(f["count"])
    out = {
        "sampled": True,
        "samples": samples,
        "ms_per_sample": round(ms_per_sample, 4),
        "step_ms": round(wall_s * 1000.0 / steps, 3),
        "steps": steps,
        "signatures": sig_list[:TOP_SIGNATURES],
        "functions": func_list,
        "phases": {p: per_step(n) for p, n in sorted(phases.items())},
    }
    if forwards > 0:
        top = sorted(input_sigs.items(), key=lambda kv: (-kv[1], sigs[kv[0]]["where"]))[:TOP_INPUT]
        out["input"] = {
            "ms_per_step": per_step(phases.get("input", 0)),
            "top": [{"where": sigs[k]["where"], "ms_per_step": per_step(n)} for k, n in top],
            "where": sigs[top[0][0]]["where"] if top else None,
        }
    else:
        out["input"] = None  # no DDP forward in the window: the input phase has no end to measure
    return out
