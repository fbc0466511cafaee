"""`ddpdoctor run`: run the user's command unchanged with the capture agent injected into
every training rank, collect the bundle, write the manifest.

Process layout::

    ddpdoctor run ──Popen(new session)──► launcher (torchrun agent / python train.py)
        │  stdout/stderr pipes → launcher.log                └─► rank processes (agent active)
        │  FIFOs term.out/term.err ◄── each rank's fd tee (also → ranks/rank<R>/output.log)
        └─ SIGINT/SIGTERM/SIGHUP forwarded to the launcher's process group
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import InputError
from ...redact import join_argv, redact_argv
from ...version import __version__
from .. import CAPTURE_VERSION
from ..agent import PACKAGE as AGENT_PACKAGE
from ..agent.contract import MANIFEST_SCHEMA
from ..agent.hang import signal_ranks_on_request
from . import hostinfo
from .manifest import finish_bundle, utc_now, write_json
from .processes import die_with_parent, pid_alive, reap_orphans, tee_pids, wait_for_exit
from .streams import Pump, byte_stream

AGENT_DIR = Path(__file__).parents[1] / "agent"  # copied whole into the run's private folder, as AGENT_PACKAGE
FR_BUFFER_SIZE = "2000"


@dataclass
class RunOptions:
    command: list[str]
    out: Path | None = None
    force: bool = False
    warmup: int = 5
    active: int = 5
    min_window_s: float = 0.5  # ... and at least this long (capture/agent/span.py); 0: exactly --active
    keep_going: bool = False
    changes: dict | None = None  # `run --try`: applied inside every rank (overrides.py)
    # steps past --warmup the window may wait for the loader's prefetched batches (issue 37); None: the agent's
    steady_within: int | None = None
    echo: bool = True  # False: the ranks' output goes to their logs only (a trial's arm: one line per arm)
    watch: bool = False  # `run --watch` (issue 38): no start-up window, incidents when something changes


@dataclass
class RunResult:
    out: Path
    exit_code: int
    status: str
    manifest: dict = field(default_factory=dict)


def default_out_dir(now: _dt.datetime | None = None) -> Path:
    now = now or _dt.datetime.now()
    return Path(f"ddpdoctor-out-{now:%Y%m%d-%H%M%S}")


def prepare_out_dir(out: Path, force: bool) -> None:
    """Create the bundle folder; never overwrite an existing one without --force, and even
    with --force only replace an empty folder or an earlier ddpdoctor bundle."""
    if out.exists():
        if not out.is_dir():
            raise InputError(f"{out}: exists and is not a folder")
        entries = list(out.iterdir())
        if entries:
            if not force:
                raise InputError(f"{out}: output folder already exists (use --force to replace it, or another --out)")
            if not (out / "manifest.json").is_file():
                raise InputError(
                    f"{out}: exists and is not a ddpdoctor bundle (no manifest.json); "
                    f"refusing to delete it even with --force"
                )
            shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("ranks", "hosts", "flight_recorder"):
        (out / sub).mkdir(exist_ok=True)


def check_command(command: list[str]) -> None:
    if not command:
        raise InputError("no command to run: ddpdoctor run [OPTIONS] -- torchrun --nproc_per_node=N train.py ARGS")
    exe = command[0]
    if os.sep in exe:
        if not os.path.exists(exe):
            raise InputError(f"{exe}: no such file")
        if not os.access(exe, os.X_OK):
            raise InputError(f"{exe}: not executable")
    elif shutil.which(exe) is None:
        hint = f" (did you mean: python {exe} …?)" if exe.endswith(".py") else ""
        raise InputError(f"{exe}: command not found{hint}")


def _torch_before(version: str | None, limit: tuple[int, int]) -> bool:
    try:
        major, minor = (int(x) for x in (version or "").split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) < limit


def capture_env(
    base: dict[str, str],
    out: Path,
    inject_dir: Path,
    opts: RunOptions,
    run_id: str,
    term_out: str,
    term_err: str,
    torch_version: str | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """The environment for the user's command, and the subset of user-visible variables
    ddpdoctor set (recorded in the manifest).  Nothing is changed that the user set."""
    env = dict(base)
    changed: dict[str, str] = {}

    def setdefault(name, value):
        if name not in env:
            env[name] = value
            changed[name] = value

    setdefault("NCCL_DEBUG", "INFO")
    if "NCCL_DEBUG_FILE" not in env:
        # each active rank replaces this with ranks/rank<R>/nccl.log; other NCCL users
        # (none expected) fall back to NCCL's own host/pid placeholders
        env["NCCL_DEBUG_FILE"] = str(out / "ranks" / "nccl.%h.%p.log")
        env["DDPDOCTOR_NCCL_FILE_OWNED"] = "1"
        changed["NCCL_DEBUG_FILE"] = str(out / "ranks" / "rank<R>" / "nccl.log")
    fr = str(out / "flight_recorder" / "nccl_trace_rank_")
    if _torch_before(torch_version, (2, 5)):
        # the names torch < 2.5 reads (newer torch warns that they are deprecated)
        setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", FR_BUFFER_SIZE)
        setdefault("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", fr)
    else:
        setdefault("TORCH_FR_BUFFER_SIZE", FR_BUFFER_SIZE)
        setdefault("TORCH_FR_DUMP_TEMP_FILE", fr)
    setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(inject_dir) + (os.pathsep + pp if pp else "")
    changed["PYTHONPATH"] = f"{inject_dir} prepended (capture agent)"
    env.update(
        {
            "DDPDOCTOR_BUNDLE": str(out),
            "DDPDOCTOR_AGENT": str(inject_dir / AGENT_PACKAGE),
            "DDPDOCTOR_RUN_ID": run_id,
            "DDPDOCTOR_LAUNCHER_PID": str(os.getpid()),
            "DDPDOCTOR_WARMUP": str(opts.warmup),
            "DDPDOCTOR_ACTIVE": str(opts.active),
            "DDPDOCTOR_MIN_WINDOW_S": str(opts.min_window_s),
            "DDPDOCTOR_KEEP_GOING": "1" if opts.keep_going else "0",
            **({"DDPDOCTOR_WATCH": "1"} if opts.watch else {}),
            **({"DDPDOCTOR_STEADY_WITHIN": str(opts.steady_within)} if opts.steady_within is not None else {}),
            "DDPDOCTOR_TERM_OUT": term_out,
            "DDPDOCTOR_TERM_ERR": term_err,
        }
    )
    env.pop("DDPDOCTOR_ACTIVE_PID", None)
    if opts.changes:  # `run --try`: these override what the user set, on purpose
        from ..agent.overrides import launcher_env

        for name, value in launcher_env(opts.changes).items():
            env[name] = value
            if name != "DDPDOCTOR_TRY":
                changed[name] = f"{value} (--try)"
    return env, changed


PRIVATE_PREFIX = "ddpdoctor-run-"


def _remove_stale_private_dirs(min_age_s: float = 60.0) -> None:
    """Private folders left by a `ddpdoctor run` that was killed with SIGKILL: owned by this
    user, older than a minute, and their owner process gone."""
    root = Path(tempfile.gettempdir())
    for d in root.glob(PRIVATE_PREFIX + "*"):
        try:
            st = d.stat()
            if st.st_uid != os.getuid() or time.time() - st.st_mtime < min_age_s:
                continue
            pid = int((d / "owner.pid").read_text())
            if pid_alive(pid):
                continue
        except (OSError, ValueError):
            continue
        shutil.rmtree(d, ignore_errors=True)


def run_capture(opts: RunOptions) -> RunResult:
    check_command(opts.command)
    out = (opts.out or default_out_dir()).absolute()
    prepare_out_dir(out, opts.force)
    run_id = uuid.uuid4().hex
    _remove_stale_private_dirs()
    private = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX))
    (private / "owner.pid").write_text(str(os.getpid()))
    try:
        return _run(opts, out, run_id, private)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _inject_folder(private: Path) -> Path:
    """The folder prepended to the command's PYTHONPATH: ``sitecustomize.py`` and the whole agent folder
    beside it (a copy, so the run does not depend on the installed package staying as it was)."""
    inject = private / "inject"
    inject.mkdir()
    shutil.copy(AGENT_DIR / "sitecustomize.py", inject / "sitecustomize.py")
    shutil.copytree(
        AGENT_DIR, inject / AGENT_PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "sitecustomize.py")
    )
    return inject


def _wait_forwarding_signals(proc: subprocess.Popen, out: Path, user_stop=None) -> tuple[int, list[str]]:
    """Wait for the user's command; SIGINT/SIGTERM/SIGHUP go to its process group (a second one kills it),
    and a rank's hang request makes the ranks dump their stacks.  The return code and the signals received."""
    interrupted: list[str] = []

    def forward(signum, _frame):
        name = signal.Signals(signum).name
        if not interrupted:
            interrupted.append(name)
            if signum == signal.SIGINT and user_stop is not None:
                user_stop.set()  # the user's Ctrl-C: gloo's teardown noise stays off the terminal
            try:
                sys.stderr.write(
                    f"\nddpdoctor: {name} received; forwarding it to the training processes (again to kill them)\n"
                )
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            sig = signum
        else:
            sig = signal.SIGKILL
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass

    old = {}
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            old[s] = signal.signal(s, forward)
        except ValueError:  # not the main thread (tests calling run_capture in a thread)
            pass
    hang_stop = threading.Event()  # a rank's hang request: SIGUSR2 for the ranks' faulthandler dumps
    threading.Thread(target=signal_ranks_on_request, args=(str(out), hang_stop), daemon=True).start()
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except InterruptedError:
                continue
    finally:
        hang_stop.set()
        for s, h in old.items():
            signal.signal(s, h)
    return rc, interrupted


def _run(opts: RunOptions, out: Path, run_id: str, private: Path) -> RunResult:
    inject = _inject_folder(private)
    term_out, term_err = str(private / "term.out"), str(private / "term.err")
    os.mkfifo(term_out)
    os.mkfifo(term_err)
    env, changed = capture_env(
        dict(os.environ), out, inject, opts, run_id, term_out, term_err, hostinfo.torch_version()
    )

    start_unix, start_iso = utc_now()
    raw_hostname = socket.gethostname()
    hostname = hostinfo.safe_hostname(raw_hostname)
    host_path = out / "hosts" / f"{hostname}.json"
    host: dict = {}

    def collect_host():  # in parallel with the training: nvidia-smi can take a second
        try:
            host.update(hostinfo.collect(opts.command, dict(os.environ)))
            write_json(host_path, host)
        except Exception as exc:
            host.setdefault("schema", hostinfo.HOST_SCHEMA)
            host.update(hostname=raw_hostname, error=f"{type(exc).__name__}: {exc}")

    host_thread = threading.Thread(target=collect_host, daemon=True)
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "ddpdoctor_version": __version__,
        "capture_version": CAPTURE_VERSION,
        "torch_version": hostinfo.torch_version(),
        "command": join_argv(opts.command),
        "argv": redact_argv(opts.command),
        "cwd": os.getcwd(),
        "hostname": raw_hostname,
        "hosts": [hostname],
        "host_files": [f"hosts/{hostname}.json"],
        "step_window": {
            "warmup": opts.warmup,
            "active": opts.active,
            "min_window_s": opts.min_window_s,
            "keep_going": opts.keep_going,
            "steady_within": opts.steady_within,
        },
        "start_time": start_iso,
        "start_unix": start_unix,
        "end_time": None,
        "status": "partial",
        "exit_code": None,
        "world_size": None,
        "ranks_present": [],
        "env_set": changed,
        "launcher_log": "launcher.log",
        "run_id": run_id,
    }
    write_json(out / "manifest.json", manifest)  # a run killed with SIGKILL leaves "partial"

    # FIFOs: open the read ends (non-blocking open), keep a dummy writer so EOF only comes at the end
    fifo_r = [os.open(p, os.O_RDONLY | os.O_NONBLOCK) for p in (term_out, term_err)]
    fifo_w = [os.open(p, os.O_WRONLY | os.O_NONBLOCK) for p in (term_out, term_err)]
    for fd in fifo_r:
        os.set_blocking(fd, True)
    log_lock = threading.Lock()
    launcher_log = open(out / "launcher.log", "ab")
    try:
        proc = subprocess.Popen(
            opts.command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    except OSError as exc:
        launcher_log.close()
        for fd in fifo_r + fifo_w:
            os.close(fd)
        manifest.update(status="failed", exit_code=127, error=f"{type(exc).__name__}: {exc}")
        write_json(out / "manifest.json", manifest)
        raise InputError(f"{opts.command[0]}: cannot start ({exc})") from None
    host_thread.start()  # after the fork: preexec_fn is only safe in a single-threaded parent
    # the launcher's own output (torchrun's banner, its tracebacks and "Root Cause" block) goes to
    # launcher.log only: the ranks' output reaches the terminal, and the card leads after the run
    user_stop = threading.Event()
    pumps = [
        Pump(os.dup(proc.stdout.fileno()), None, launcher_log, log_lock),
        Pump(os.dup(proc.stderr.fileno()), None, launcher_log, log_lock),
        Pump(fifo_r[0], byte_stream(sys.stdout) if opts.echo else None, stopped=user_stop),
        Pump(fifo_r[1], byte_stream(sys.stderr) if opts.echo else None, stopped=user_stop),
    ]
    proc.stdout.close()
    proc.stderr.close()
    for p in pumps:
        p.start()

    rc, interrupted = _wait_forwarding_signals(proc, out, user_stop)
    exit_code = rc if rc >= 0 else 128 - rc
    if interrupted:  # 130 for Ctrl-C, 143 for SIGTERM, as a shell reports it
        exit_code = 128 + signal.Signals[interrupted[0]].value
    # the user's command has ended: stray descendants (ranks torchrun did not reap, daemons)
    # are this run's orphans; end them, then let the rank tees drain
    tees = tee_pids(out)
    wait_for_exit(tees, 3.0)
    reaped = reap_orphans(run_id, exclude=set(tees))
    wait_for_exit(tees, 3.0)
    reaped += reap_orphans(run_id)
    for fd in fifo_w:
        os.close(fd)
    for p in pumps:
        p.join(timeout=5)
    launcher_log.close()
    host_thread.join(timeout=30)
    manifest = finish_bundle(out, manifest, host, exit_code, interrupted[0] if interrupted else None)
    if reaped:
        manifest["orphans_killed"] = reaped
    write_json(host_path, host)
    write_json(out / "manifest.json", manifest)
    return RunResult(out, exit_code, manifest["status"], manifest)
