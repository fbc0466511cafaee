"""``DDPDOCTOR_CAPTURE=DIR``: capture without wrapping the launcher.

``ddpdoctor_capture.pth``, installed into site-packages with the package, runs one line at every
Python start-up: when ``DDPDOCTOR_CAPTURE`` is set it calls :func:`start` (cost when unset: one
``os.environ`` lookup; everything it does is wrapped so start-up never breaks).  ``start`` does in
this process what ``ddpdoctor run`` does around it:

- the same agent (the ``capture/agent/`` folder, loaded by path as ``sitecustomize`` loads it under ``run``),
  which decides the same way whether this process is a training rank (``process.activation``: a rank from
  start-up with RANK/LOCAL_RANK/WORLD_SIZE, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK; any other process
  only once it joins a process group -- spawn's children, Ray Train's workers --, loading nothing but the
  agent's join watch until then; launcher and tool processes never are);
- the same environment defaults (``host/launcher.capture_env``: NCCL_DEBUG, the NCCL debug file per rank,
  Flight Recorder dumps), set only where the job did not set them;
- what the launcher writes outside the ranks (manifest.json, hosts/<host>.json, the end-of-run
  analysis) is written by the ranks themselves (``host/env_records.py``).

``ddpdoctor run`` wins: under it (``DDPDOCTOR_BUNDLE`` set by the launcher) this does nothing.
"""

from __future__ import annotations

import os
import sys

from .agent import CORE, PACKAGE

MODE_VAR = "DDPDOCTOR_CAPTURE_MODE"  # set in the ranks' environment: "environment"
AGENT_MODULE = CORE  # where AGENT lives once the agent folder is loaded
AGENT_PACKAGE = PACKAGE
AGENT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent")


def _say(message: str) -> None:
    try:
        sys.stderr.write(f"ddpdoctor: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


def load_agent_if_loaded():
    mod = sys.modules.get(AGENT_MODULE)
    return getattr(mod, "AGENT", None)


def load_agent(module: str = AGENT_MODULE):
    """A module of the agent (the ``capture/agent/`` folder loaded by path as ``sitecustomize`` loads it):
    its core, or only its join watch for a process that is not a rank at start-up."""
    mod = sys.modules.get(module)
    if mod is not None:
        return mod
    import importlib
    import importlib.util

    if AGENT_PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            AGENT_PACKAGE, os.path.join(AGENT_DIR, "__init__.py"), submodule_search_locations=[AGENT_DIR]
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules[AGENT_PACKAGE] = package
        try:
            spec.loader.exec_module(package)
        except BaseException:
            sys.modules.pop(AGENT_PACKAGE, None)
            raise
    try:
        return importlib.import_module(module)
    except BaseException:
        for name in [n for n in sys.modules if n == AGENT_PACKAGE or n.startswith(AGENT_PACKAGE + ".")]:
            sys.modules.pop(name, None)
        raise


_TRIED: list[str] = []


def start(out: str | None = None) -> bool:
    """Activate capture in this process if it is a training rank; True when it did.  Never raises.
    Tried once per process and folder (a venv with a lib64 link reads the same .pth twice)."""
    key = out or os.environ.get("DDPDOCTOR_CAPTURE") or ""
    if key in _TRIED:
        return load_agent_if_loaded() is not None
    _TRIED.append(key)
    try:
        return _start(out)
    except Exception as exc:  # a capture problem must not stop the user's program
        _say(f"capture disabled in pid {os.getpid()}: {type(exc).__name__}: {exc}")
        return False


def _start(out: str | None) -> bool:
    env = os.environ
    raw = (out or env.get("DDPDOCTOR_CAPTURE") or "").strip()
    if not raw:
        return False
    if env.get("DDPDOCTOR_BUNDLE") and env.get(MODE_VAR) != "environment":
        return False  # under `ddpdoctor run`: its own capture
    if _is_ddpdoctor_itself(sys.orig_argv):
        return False  # `ddpdoctor run|analyze …` under srun carries rank variables too
    from .agent import process

    bundle = os.path.abspath(os.path.expanduser(raw))
    probe = dict(env, DDPDOCTOR_BUNDLE=bundle)
    argv = process.process_argv()
    mode = process.activation(probe, argv, os.getppid())
    if mode is None:
        return False
    if mode != process.RANK:  # not a rank yet: one when it joins a process group (spawn's ranks, Ray's workers)
        if AGENT_PACKAGE + ".join" not in sys.modules:
            spawned = process.is_spawned_child(argv)

            def become_rank(_args, _kwargs):  # the rest of the agent loads only if the process joins
                return load_agent().join_as_rank(argv, spawned, False, lambda rank_env: _prepare(bundle, rank_env))

            join = load_agent(AGENT_PACKAGE + ".join")
            join.watch(join.Pending(become_rank))
        return False
    agent_mod = load_agent()
    if agent_mod.AGENT is not None:
        return False  # already active in this process
    attach = _prepare(bundle, probe)
    if attach is None:
        return False
    agent = agent_mod.start(os.environ, prepare=lambda rank_env: _prepare(bundle, rank_env))
    attach(agent)
    return True


def _prepare(bundle: str, env):
    """This process is a rank: its share of the run records (may refuse: another run's bundle, said why) and
    the environment `ddpdoctor run` would give it.  Returns what attaches the records to its agent."""
    from .host import env_records

    run = env_records.EnvRun.open(bundle, dict(env, DDPDOCTOR_BUNDLE=bundle))
    if run is None:
        return None
    for name, value in run.environment().items():
        os.environ[name] = value
    return run.attach


def _is_ddpdoctor_itself(argv: list[str]) -> bool:
    """ddpdoctor's own processes (``ddpdoctor …``, ``python -m ddpdoctor …``) are never ranks."""
    for i, a in enumerate(argv[:3]):
        if os.path.basename(a) == "ddpdoctor" or (a == "-m" and i + 1 < len(argv) and argv[i + 1] == "ddpdoctor"):
            return True
    return False
