"""The run-level records of a ``DDPDOCTOR_CAPTURE`` bundle, written by the ranks themselves
(there is no ``ddpdoctor run`` launcher to write them):

- ``manifest.json``: created by the first rank to start (schema ``ddpdoctor.manifest/1``, with
  ``"capture": "environment"``), each rank adds its host; finished, under a file lock, by the
  last rank of the world to end, with ``manifest.finish_bundle`` (the launcher's own code);
- ``hosts/<host>.json``: written by the first rank of each host (``hostinfo.collect``, in a thread:
  nvidia-smi can take a second); completed with the ranks' facts by the last rank;
- the end-of-run analysis: the last rank runs ``ddpdoctor analyze DIR --report DIR/report``
  (``DDPDOCTOR_CAPTURE_ANALYZE=0`` skips it) and says in one stderr line where the report is.

The coordination files (lock, claims, per-rank end markers) live in ``DIR/.ddpdoctor-env/``,
removed when the manifest is finished.  A folder that holds another run's bundle is never
written into: capture is then off for the job, said in one stderr line per rank.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
import subprocess
import sys
import threading
import time

from ...version import __version__
from .. import CAPTURE_VERSION
from ..agent.contract import MANIFEST_SCHEMA

STATE_DIR = ".ddpdoctor-env"
HOST_WAIT_S = 15.0


def run_key(env) -> str:
    """What the ranks of one job share and another job does not: the launcher's run id, the Slurm
    job step, else the rendezvous address (the shell-loop shape)."""
    if env.get("DDPDOCTOR_RUN_ID"):
        return env["DDPDOCTOR_RUN_ID"]
    if env.get("TORCHELASTIC_RUN_ID") and env.get("TORCHELASTIC_RUN_ID") != "none":
        return f"torchelastic:{env['TORCHELASTIC_RUN_ID']}"
    if env.get("SLURM_JOB_ID"):
        return f"slurm:{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '')}"
    for var in ("OMPI_MCA_orte_hnp_uri", "PMIX_NAMESPACE", "PMI_JOBID"):
        if env.get(var):
            return f"{var}:{env[var]}"
    return f"rendezvous:{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as fh:
            d = json.load(fh)
        return d if isinstance(d, dict) else None
    except (OSError, ValueError):
        return None


def _now() -> tuple[float, str]:
    t = time.time()
    return t, _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")


class EnvRun:
    """One rank's share of the run-level records."""

    def __init__(self, out: str, env: dict, key: str):
        self.out, self.env, self.key = out, env, key
        self.state = os.path.join(out, STATE_DIR)
        self.raw_host = socket.gethostname()
        from .hostinfo import safe_hostname

        self.host = safe_hostname(self.raw_host)
        self.host_path = os.path.join(out, "hosts", f"{self.host}.json")
        self.host_thread: threading.Thread | None = None
        self.changed: dict[str, str] = {}
        self.agent = None
        self.done = False

    # ------------------------------------------------------------------ start
    @classmethod
    def open(cls, out: str, env: dict) -> EnvRun | None:
        run = cls(out, env, run_key(env))
        if run._foreign(_read_json(os.path.join(out, "manifest.json"))):
            return None  # checked before anything is created in the folder
        for sub in ("ranks", "hosts", "flight_recorder", STATE_DIR):
            os.makedirs(os.path.join(out, sub), exist_ok=True)
        with run.lock():
            m = _read_json(os.path.join(out, "manifest.json"))
            if run._foreign(m):
                return None
            m = m or run._new_manifest()
            if run.host not in m["hosts"]:
                m["hosts"].append(run.host)
                m["host_files"].append(f"hosts/{run.host}.json")
            _write_json(os.path.join(out, "manifest.json"), m)
            first_here = run._claim(f"host-{run.host}")
        if first_here:
            run.host_thread = threading.Thread(target=run._write_host, name="ddpdoctor-host", daemon=True)
            run.host_thread.start()
        return run

    def _foreign(self, m: dict | None) -> bool:
        """The folder holds another run's bundle, or this run's finished one: say so, write nothing."""
        if m is None or (m.get("run_id") == self.key and not m.get("end_time")):
            return False
        why = "another run's bundle" if m.get("run_id") != self.key else "a finished run's bundle"
        say(
            f"DDPDOCTOR_CAPTURE={self.out} holds {why}: capture is off for this run "
            f"(give each job its own folder, e.g. DDPDOCTOR_CAPTURE=/shared/runs/$SLURM_JOB_ID)"
        )
        return True

    def environment(self) -> dict[str, str]:
        """The variables `ddpdoctor run` would give this rank (launcher.capture_env), without the
        launcher's own (its pid, its terminal pipes, the private PYTHONPATH folder)."""
        from .launcher import RunOptions, capture_env

        keep = os.environ.get("DDPDOCTOR_KEEP_GOING", "1")  # default: training goes on after the window
        opts = RunOptions(
            command=[],
            warmup=_int(os.environ.get("DDPDOCTOR_WARMUP"), 5),
            active=_int(os.environ.get("DDPDOCTOR_ACTIVE"), 5),
            keep_going=keep == "1",
        )
        from .hostinfo import torch_version

        env, changed = capture_env(
            dict(os.environ), _Path(self.out), _Path(self.state), opts, self.key, "", "", torch_version()
        )
        drop = ("PYTHONPATH", "DDPDOCTOR_AGENT", "DDPDOCTOR_LAUNCHER_PID", "DDPDOCTOR_TERM_OUT", "DDPDOCTOR_TERM_ERR")
        out = {k: v for k, v in env.items() if k not in drop and os.environ.get(k) != v}
        out["DDPDOCTOR_CAPTURE_MODE"] = "environment"
        self.changed = {k: v for k, v in changed.items() if k != "PYTHONPATH"}
        return out

    def _new_manifest(self) -> dict:
        from ...redact import join_argv, redact_argv
        from ..agent.process import process_argv

        argv = process_argv()
        t, iso = _now()
        return {
            "schema": MANIFEST_SCHEMA,
            "ddpdoctor_version": __version__,
            "capture_version": CAPTURE_VERSION,
            "capture": "environment",
            "command": join_argv(argv),
            "argv": redact_argv(argv),
            "cwd": os.getcwd(),
            "hostname": self.raw_host,
            "hosts": [],
            "host_files": [],
            "step_window": {
                "warmup": _int(self.env.get("DDPDOCTOR_WARMUP"), 5),
                "active": _int(self.env.get("DDPDOCTOR_ACTIVE"), 5),
                "keep_going": self.env.get("DDPDOCTOR_KEEP_GOING", "1") == "1",
            },
            "start_time": iso,
            "start_unix": t,
            "end_time": None,
            "status": "partial",
            "exit_code": None,
            "world_size": None,
            "ranks_present": [],
            "env_set": {},
            "launcher_log": None,
            "run_id": self.key,
        }

    def _write_host(self) -> None:
        from ..agent.process import process_argv
        from . import hostinfo

        try:
            host = hostinfo.collect(process_argv(), dict(os.environ))
        except Exception as exc:
            host = {"schema": hostinfo.HOST_SCHEMA, "hostname": self.raw_host, "error": f"{type(exc).__name__}: {exc}"}
        _write_json(self.host_path, host)

    # ------------------------------------------------------------------ coordination
    @contextlib.contextmanager
    def lock(self):
        import fcntl

        fd = os.open(os.path.join(self.state, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)  # POSIX locks: also across hosts on NFS
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.lockf(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _claim(self, name: str) -> bool:
        try:
            os.close(os.open(os.path.join(self.state, f"{name}.claim"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            return True
        except FileExistsError:
            return False

    # ------------------------------------------------------------------ the end
    def attach(self, agent) -> None:
        """Run :meth:`rank_ended` after the agent has flushed this rank (its trace, settings, exit)."""
        self.agent = agent
        with self.lock():
            m = _read_json(os.path.join(self.out, "manifest.json")) or self._new_manifest()
            m["env_set"] = {**(m.get("env_set") or {}), **self.changed}
            _write_json(os.path.join(self.out, "manifest.json"), m)
        orig = agent.finalize

        def finalize(why: str) -> None:
            orig(why)
            if os.getpid() == agent.pid and not self.done:
                self.done = True
                try:
                    self.rank_ended()
                except Exception as exc:
                    agent.internal_error("run records (DDPDOCTOR_CAPTURE)", exc)

        agent.finalize = finalize

    def _world(self) -> int:
        a = self.agent
        world = a.world_size
        torch = a.torch or sys.modules.get("torch")
        with contextlib.suppress(Exception):
            if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
                world = max(world, torch.distributed.get_world_size())
        return max(1, world)

    def rank_ended(self) -> None:
        a = self.agent
        if self.host_thread is not None:
            self.host_thread.join(HOST_WAIT_S)
        code = a.life.exit_code if isinstance(a.life.exit_code, int) else 0
        world = self._world()
        with self.lock():
            ended = os.path.join(self.state, "ended")
            os.makedirs(ended, exist_ok=True)
            with open(os.path.join(ended, f"rank{a.rank}"), "w") as fh:
                fh.write(str(code))
            codes = {}
            for name in os.listdir(ended):
                with contextlib.suppress(OSError, ValueError):
                    codes[int(name[4:])] = int(open(os.path.join(ended, name)).read() or 0)
            if len(codes) < world:
                return
            manifest = self._finish(codes, world)
        if self.env.get("DDPDOCTOR_CAPTURE_ANALYZE", "1") != "0":
            self._analyze(manifest)

    def _finish(self, codes: dict[int, int], world: int) -> dict:
        """Every rank of the world has ended: the launcher's end-of-run records, by the last rank."""
        import glob
        import shutil

        from .manifest import finish_bundle

        path = os.path.join(self.out, "manifest.json")
        manifest = _read_json(path) or self._new_manifest()
        exit_code = next((c for _, c in sorted(codes.items()) if c), 0)
        mine = None
        for hp in sorted(glob.glob(os.path.join(self.out, "hosts", "*.json"))):
            host = _read_json(hp)
            if host is None:
                continue
            finish_bundle(_Path(self.out), dict(manifest), host, exit_code, None)
            _write_json(hp, host)
            if hp == self.host_path:
                mine = host
        manifest = finish_bundle(_Path(self.out), manifest, mine or {"hostname": self.raw_host}, exit_code, None)
        # the folder holds the whole job (every host's ranks), not one node's as `run --out DIR/$(hostname)` does
        traced = manifest.get("ranks_present") or []
        manifest["world_size"] = max(world, manifest.get("world_size") or 0)
        manifest["ranks_expected_here"] = manifest["world_size"]
        if manifest["status"] != "failed":
            complete = len(traced) == manifest["world_size"] and manifest.get("windows_complete")
            manifest["status"] = "complete" if complete else "partial"
        if not manifest.get("nnodes"):  # no launcher argument to read it from: the hosts the ranks ran on
            from .manifest import read_rank_settings

            names = {s.get("hostname") for s in read_rank_settings(_Path(self.out)).values() if s.get("hostname")}
            manifest["nnodes"] = len(names) or None
        manifest["rank_exit_codes"] = {str(r): c for r, c in sorted(codes.items())}
        _write_json(path, manifest)
        shutil.rmtree(self.state, ignore_errors=True)
        return manifest

    def _watch_summary(self, env: dict) -> None:
        try:
            say(_watch_summary_of(self.out, env))
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            say(f"capture {self.out}: watched; summary failed ({exc}): ddpdoctor analyze {self.out}")

    def _analyze(self, manifest: dict) -> None:
        """`ddpdoctor run`'s end-of-run analysis: the report goes to DIR/report/, one line to stderr."""
        report = os.path.join(self.out, "report")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DDPDOCTOR_") and k not in ("NCCL_DEBUG_FILE",)}
        if self.env.get("DDPDOCTOR_WATCH") == "1":  # a watched run (issue 38): its one screen, into a file
            self._watch_summary(env)
            return
        status = (
            f"status {manifest.get('status')}, traces from {len(manifest.get('ranks_present') or [])} of "
            f"{manifest.get('world_size')} ranks"
        )
        # its own session: when a peer failed, the job's launcher kills this rank's process group (torchrun
        # does, seen with examples/oom_skip_batch.py); the analysis then finishes without the rank
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ddpdoctor", "analyze", self.out, "--report", report, "-q"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            _, err = proc.communicate(timeout=float(os.environ.get("DDPDOCTOR_CAPTURE_ANALYZE_TIMEOUT_S", "900")))
            res = subprocess.CompletedProcess(proc.args, proc.returncode, None, err)
        except (OSError, subprocess.SubprocessError) as exc:
            say(f"capture {self.out}: {status}; analysis failed ({exc}): ddpdoctor analyze {self.out}")
            return
        verdict = (_read_json(os.path.join(report, "report.json")) or {}).get("verdict") or {}
        if res.returncode in (0, 3) and verdict:
            first = (verdict.get("summary") or "").split(". ")[0].rstrip(".")
            say(f"capture {self.out}: {status}; {first} (report: {report}/report.md)")
        else:
            last = (res.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [f"exit {res.returncode}"]
            say(f"capture {self.out}: {status}; analysis failed ({last[0]}): ddpdoctor analyze {self.out}")


def _watch_summary_of(out: str, env: dict) -> str:
    """`ddpdoctor analyze DIR` on a watched run's folder: DIR/watch-summary.txt, and the line that names it."""
    from ..agent.watch_incident import write_summary

    w = write_summary(out)
    path = os.path.join(out, "watch-summary.txt")
    with open(path, "w", encoding="utf-8") as fh:
        subprocess.run(
            [sys.executable, "-m", "ddpdoctor", "analyze", out],
            env=env,
            stdout=fh,
            stderr=subprocess.DEVNULL,
            timeout=900,
        )
    n = len(w["incidents"])
    return f"capture {out}: watched, {n} incident{'s' if n != 1 else ''} (summary: {path})"


def say(message: str) -> None:
    """One line on this rank's stderr."""
    try:
        sys.stderr.write(f"ddpdoctor: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


def _int(v, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _Path(p):  # launcher's functions take pathlib paths
    from pathlib import Path

    return Path(p)
