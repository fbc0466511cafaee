"""Part of the capture agent (loaded by path beside it): the job's whole process tree, measured, so that
"outside the job" means processes that are not the job's.

The job is every process under its root: the ``ddpdoctor run`` process (``DDPDOCTOR_LAUNCHER_PID``) when
it is an ancestor of this rank, which takes in torchrun's agent, every rank, their DataLoader workers and
ddpdoctor's own output pumps; without it, the torchrun agent (this rank's parent under torchrun).  One
rank per host (local rank 0) samples, during the window, the host's runnable tasks (/proc/loadavg) and
the job's threads in state R read right after, over every process of the tree (found again at every
sample through /proc/<pid>/task/<tid>/children): their difference is what runs outside the job.  At the
window's start and stop it sums the tree's CPU time (utime + stime + the reaped children's cutime + cstime
of every process, from /proc/<pid>/stat), so a process that exits in the window stays counted in its
parent.  ``bundle/evidence.py`` turns the record (``evidence.contention.job``) into the contention facts.

Linux only: anything unreadable gives None, and nothing raises into the user's program.
"""

from __future__ import annotations

import os

MAX_PROCESSES = 4096  # a tree larger than this is not walked further (counted as read so far)


def _read(path: str) -> str | None:
    """One small /proc file (os.read: about half the cost of open().read(), which matters at ~100
    threads every 0.1 s)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def stat_fields(text: str | None) -> list[str] | None:
    """The fields of a /proc/<pid>/stat line after the command name (field 3, the state, is index 0)."""
    if not text or ")" not in text:
        return None
    return text.rsplit(")", 1)[1].split()


def parent_of(pid: int, read=_read) -> int | None:
    f = stat_fields(read(f"/proc/{pid}/stat"))
    try:
        return int(f[1]) if f else None
    except (IndexError, ValueError):
        return None


def is_ancestor(root: int, pid: int, read=_read) -> bool:
    """``root`` is ``pid`` or one of its ancestors."""
    seen = set()
    while pid and pid not in seen:
        if pid == root:
            return True
        seen.add(pid)
        pid = parent_of(pid, read) or 0
    return False


def job_root(env, pid: int | None = None, read=_read) -> tuple[int, str] | None:
    """(root pid, what it is): the ``ddpdoctor run`` process when it is this rank's ancestor, else the
    torchrun agent (the parent of a rank torchrun started), else None (a plain single process)."""
    pid = os.getpid() if pid is None else pid
    try:
        launcher = int(env.get("DDPDOCTOR_LAUNCHER_PID") or 0)
    except ValueError:
        launcher = 0
    if launcher > 0 and launcher != pid and is_ancestor(launcher, pid, read):
        return launcher, "ddpdoctor run"
    if env.get("TORCHELASTIC_RUN_ID") is not None:
        parent = parent_of(pid, read)
        if parent and parent > 1:
            return parent, "torchrun agent"
    return None


def tree(root: int, read=_read, listdir=os.listdir) -> list[int]:
    """``root`` and every descendant (children of every thread), breadth first."""
    out, todo, seen = [], [root], {root}
    while todo and len(out) < MAX_PROCESSES:
        pid = todo.pop(0)
        try:
            tids = listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # exited since its parent listed it
        out.append(pid)
        for tid in tids:
            for child in (read(f"/proc/{pid}/task/{tid}/children") or "").split():
                if child.isdigit() and int(child) not in seen:
                    seen.add(int(child))
                    todo.append(int(child))
    return out


def runnable_threads(pids: list[int], read=_read, listdir=os.listdir) -> int:
    """Threads in state R (running or waiting for a CPU) over these processes."""
    n = 0
    for pid in pids:
        try:
            tids = listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            f = stat_fields(read(f"/proc/{pid}/task/{tid}/stat"))
            n += bool(f) and f[0] == "R"
    return n


def cpu_seconds(pids: list[int], read=_read, hz: int | None = None) -> float | None:
    """utime + stime + cutime + cstime of these processes, in seconds (None when none could be read)."""
    hz = hz or _clock_ticks()
    total, read_any = 0.0, False
    for pid in pids:
        f = stat_fields(read(f"/proc/{pid}/stat"))
        try:
            total += sum(int(x) for x in f[11:15]) / hz  # fields 14-17
            read_any = True
        except (TypeError, ValueError):
            continue
    return total if read_any else None


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (ValueError, OSError, AttributeError):
        return 100


class JobSampler:
    """Created at the window's start on the host's first local rank; ``sample(host_runnable)`` right
    after each /proc/loadavg reading, ``record()`` at the window's stop."""

    def __init__(self, root: int, what: str):
        self.root, self.what = root, what
        self.outside: list[int] = []  # host runnable - job runnable, per sample
        self.job: list[int] = []  # the job's runnable threads, per sample
        self.processes = 0
        self.cpu_start = cpu_seconds(tree(root))

    @classmethod
    def for_rank(cls, env) -> JobSampler | None:
        if (env.get("LOCAL_RANK") or "0") != "0":
            return None  # one rank per host measures the whole job
        try:
            found = job_root(env)
            return cls(*found) if found else None
        except Exception:  # never into the user's program: the rank records its own instead
            return None

    def sample(self, host_runnable: int) -> None:
        try:
            pids = tree(self.root)
            mine = runnable_threads(pids) if pids else None
        except Exception:  # a reading lost, not the window's other evidence
            return
        if mine is None:
            return
        self.processes = max(self.processes, len(pids))
        self.job.append(mine)
        self.outside.append(host_runnable - mine)  # the reading thread is in both counts

    def record(self) -> dict:
        try:
            end = cpu_seconds(tree(self.root))
        except Exception:
            end = None
        cpu = round(max(0.0, end - self.cpu_start), 6) if end is not None and self.cpu_start is not None else None
        return {
            "root": self.what,
            "processes": self.processes,
            "cpu_s": cpu,
            "runnable_samples": list(self.job),
            "outside_runnable_samples": list(self.outside),
        }
