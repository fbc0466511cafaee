"""Part of the capture agent (standard library only): which processes are training ranks, and the tee
of file descriptors 1 and 2."""

from __future__ import annotations

import os
import signal
import sys

_TORCHRUN_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "torch.distributed.elastic",
    "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli",
    "deepspeed.launcher",
)
_LAUNCHER_SCRIPTS = ("torchrun", "accelerate", "deepspeed")
# where a rank finds its global rank, local rank and world size: torchrun, then Slurm tasks and
# MPI launchers (`srun … ddpdoctor run --out DIR/task$SLURM_PROCID -- python train.py`)
LAUNCHER_RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
WORLD_VARS = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_SHELLS = ("sh", "bash", "dash", "zsh", "ksh", "env", "time", "nice", "taskset", "numactl", "stdbuf", "timeout")


# --------------------------------------------------------------------------------------
# which processes are training ranks
# --------------------------------------------------------------------------------------


def is_launcher_process(argv: list[str]) -> bool:
    """torchrun's own agent process (``torchrun …``, ``python -m torch.distributed.run …``)."""
    for i, a in enumerate(argv[1:], 1):
        if a == "-m" and i + 1 < len(argv):
            return argv[i + 1].startswith(_TORCHRUN_MODULES)
        if a.startswith("-m") and len(a) > 2:
            return a[2:].startswith(_TORCHRUN_MODULES)
        if not a.startswith("-"):
            base = os.path.basename(a)
            return base.split(".")[0].split("-")[0] in _LAUNCHER_SCRIPTS
    return False


def _proc_parent(pid: int) -> tuple[int | None, str]:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None, ""
    comm = stat[stat.find("(") + 1 : stat.rfind(")")]
    try:
        return int(stat[stat.rfind(")") + 2 :].split()[1]), comm
    except (IndexError, ValueError):
        return None, comm


def started_by_launcher(ppid: int, launcher_pid: str | None, hops: int = 4) -> bool:
    """The parent is `ddpdoctor run`, possibly through shells and wrappers
    (``bash run.sh`` → ``python train.py``, ``env X=1 python …``, ``numactl … python …``)."""
    pid = ppid
    for _ in range(hops):
        if str(pid) == launcher_pid:
            return True
        parent, comm = _proc_parent(pid)
        if parent is None or (comm not in _SHELLS and not _is_launcher_pid(pid)):
            return False
        pid = parent
    return False


def _is_launcher_pid(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return False
    return bool(argv) and is_launcher_process(argv)


def is_helper_process(argv: list[str]) -> bool:
    """multiprocessing children (spawn/forkserver DataLoader workers, ``torch.multiprocessing.spawn``'s ranks),
    compile workers, resource trackers: never ranks at start (a spawned child becomes one when it joins a
    process group: ``activation``)."""
    return is_spawned_child(argv) or is_tool_process(argv)


def is_spawned_child(argv: list[str]) -> bool:
    """A child started by multiprocessing's spawn method: ``torch.multiprocessing.spawn`` / ``start_processes``
    (the DDP tutorial's ranks, PyTorch-Ignite's ``idist.Parallel``) and spawn-start DataLoader workers alike."""
    return "--multiprocessing-fork" in argv or "multiprocessing.spawn" in " ".join(argv)


def is_tool_process(argv: list[str]) -> bool:
    """The forkserver, resource trackers, torch.compile's workers: never ranks."""
    joined = " ".join(argv)
    return (
        "multiprocessing.forkserver" in joined
        or "multiprocessing.resource_tracker" in joined
        or "compile_worker" in joined
    )


def started_as_peer_rank(env) -> bool:
    """A rank started by another rank (Lightning's subprocess launcher re-runs the script with
    LOCAL_RANK=1..N-1 from rank 0): it carries a rank different from the one that started it."""
    parent = env.get("DDPDOCTOR_ACTIVE_RANK")
    mine = env_int(env, "RANK", env_int(env, "LOCAL_RANK"))
    return parent is not None and mine is not None and str(mine) != parent


def resolve_rank(env) -> int:
    """The global rank: the launcher's variable, else NODE_RANK x local ranks per node +
    LOCAL_RANK (Lightning's own launcher sets only these)."""
    r = first_int(env, LAUNCHER_RANK_VARS, None)
    if r is not None:
        return r
    local = first_int(env, LOCAL_RANK_VARS, 0)
    node = env_int(env, "NODE_RANK", env_int(env, "GROUP_RANK", 0)) or 0
    per_node = env_int(env, "LOCAL_WORLD_SIZE")
    if per_node is None and node:
        world, nnodes = env_int(env, "WORLD_SIZE"), env_int(env, "NUM_NODES", env_int(env, "NNODES"))
        per_node = world // nnodes if world and nnodes else None
    return node * (per_node or 0) + local


# how a process under capture starts (``activation``)
RANK = "rank"  # a rank from the start: the launcher's rank variables say so (confirmed when it joins)
PROVISIONAL = "provisional"  # the command's own Python process: recorded aside, a rank if it joins or if nothing does
ON_JOIN = "on_join"  # anything else: a rank only once it joins a process group (spawn's children, Ray's workers)


def activation(env, argv: list[str], ppid: int) -> str | None:
    """How this process takes part (RANK / PROVISIONAL / ON_JOIN), or None: never a rank (a launcher, a tool
    process, nothing under capture).  A process becomes a rank when it joins a process group; the launcher's
    variables are an early hint only (they let the rank record from its first line)."""
    if not env.get("DDPDOCTOR_BUNDLE") or is_launcher_process(argv) or is_tool_process(argv):
        return None
    if is_spawned_child(argv):
        return ON_JOIN
    if env.get("DDPDOCTOR_ACTIVE_PID"):  # a descendant of an active process (workers, helpers, subprocesses)
        return RANK if started_as_peer_rank(env) else ON_JOIN
    if any(k in env for k in LAUNCHER_RANK_VARS + LOCAL_RANK_VARS):
        return RANK
    # the top Python process of the user's command, or the one process a launcher started
    # (`accelerate launch --cpu train.py` runs the script as its child): one rank, unless it starts ranks
    if started_by_launcher(ppid, env.get("DDPDOCTOR_LAUNCHER_PID")):
        return PROVISIONAL
    return ON_JOIN


def should_activate(env, argv: list[str], ppid: int) -> bool:
    """The agent starts recording at interpreter start-up (a rank by its variables, or provisionally)."""
    return activation(env, argv, ppid) in (RANK, PROVISIONAL)


def process_argv() -> list[str]:
    """The interpreter's full command line (sys.argv is incomplete while site runs)."""
    if hasattr(sys, "orig_argv"):  # Python >= 3.10
        return list(sys.orig_argv)
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return [sys.executable, *sys.argv]


# --------------------------------------------------------------------------------------
# fd tee
# --------------------------------------------------------------------------------------


def _open_fifo(path: str | None) -> int | None:
    if not path:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.set_blocking(fd, True)
        return fd
    except OSError:
        return None


def start_fd_tee(log_path: str, term_out: str | None, term_err: str | None) -> int | None:
    """Redirect fds 1 and 2 into pipes read by a forked copy of this process, which writes
    every byte to ``log_path`` and to the terminal (the launcher's FIFOs, else the original
    fds).  The copy leaves its session so process-group signals do not cut the log short,
    ignores SIGINT/SIGTERM, and exits when every writer has closed the pipes."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    pid = os.fork()
    if pid == 0:  # the tee process
        code = 0
        try:
            os.setsid()
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
                signal.signal(s, signal.SIG_IGN)
            os.close(w_out)
            os.close(w_err)
            log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            outs = {r_out: _open_fifo(term_out), r_err: _open_fifo(term_err)}
            if outs[r_out] is None:
                outs[r_out] = os.dup(1)
            if outs[r_err] is None:
                outs[r_err] = os.dup(2)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # hold no reference to the rank's original stdio
                os.dup2(devnull, fd)
            import select

            open_fds = [r_out, r_err]
            while open_fds:
                ready, _, _ = select.select(open_fds, [], [])
                for fd in ready:
                    try:
                        data = os.read(fd, 65536)
                    except InterruptedError:
                        continue
                    if not data:
                        open_fds.remove(fd)
                        continue
                    try:
                        os.write(log, data)
                    except OSError:
                        pass
                    term = outs.get(fd)
                    if term is not None:
                        try:
                            view = memoryview(data)
                            while view:
                                n = os.write(term, view)
                                view = view[n:]
                        except OSError:
                            outs[fd] = None
        except BaseException:
            code = 1
        os._exit(code)
    os.dup2(w_out, 1)
    os.dup2(w_err, 2)
    for fd in (w_out, w_err, r_out, r_err):
        os.close(fd)
    return pid


def first_int(env, names, default):
    for n in names:
        v = env_int(env, n)
        if v is not None:
            return v
    return default


def env_int(env, name, default=None):
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return default
