"""Part of the capture agent (standard library only): how a rank ends.

- ``Lifecycle``: the exit hooks (``sys.excepthook``, ``threading.excepthook``, ``sys.exit``,
  ``atexit``), SIGTERM/SIGINT/SIGHUP handlers (only where the script has none) and the signal watcher
  thread for a main thread blocked in C++, the fork handler that detaches forked children; it holds
  the exit code and reason settings.json records.
- ``Ending``: ending the rank after its window (together with its peers, with a grace timer), the
  watchdog for a rank stuck in a collective a stopped peer never joins, and the stack dumps of a
  hang (``hang.HangWatch``, started here).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time


class Lifecycle:
    def __init__(self, agent):
        self.agent = agent
        self.exit_code = None
        self.exit_reason = None
        self.signal_handled = False

    def install(self) -> None:
        self._orig_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        self._orig_thread_hook = threading.excepthook
        threading.excepthook = self._thread_excepthook
        self._orig_exit = sys.exit
        sys.exit = self._sys_exit
        atexit.register(self._atexit)
        self._install_signal_handlers()
        self._enable_fatal_stacks()

    def _enable_fatal_stacks(self) -> None:
        """A rank that dies of a fatal signal (SIGSEGV; SIGABRT from gloo's or NCCL's ``std::terminate``; SIGBUS,
        SIGFPE, SIGILL) prints every thread's Python stack on its stderr before it dies, as
        ``PYTHONFAULTHANDLER=1`` does: where the rank was (its collective's call site) is then in its log, which
        a native crash otherwise leaves without a traceback. Nothing changes while the rank lives, and the
        exit code stays the signal's. Left as it is when the script or the environment set it up."""
        import faulthandler

        with self.agent.errors.quiet("faulthandler.enable"):
            if not faulthandler.is_enabled():
                faulthandler.enable(all_threads=True)

    # ---------------------------------------------------------------- exceptions and exit
    def _excepthook(self, exc_type, exc, tb):
        with self.agent.errors.quiet("excepthook"):
            self.agent.settings.record_exception(exc_type, exc, tb)
            self.exit_code = 1
            self.exit_reason = f"uncaught {exc_type.__name__}"
            self.agent.finalize("uncaught exception")
        self._orig_excepthook(exc_type, exc, _without_agent_frames(tb))

    def _thread_excepthook(self, args):
        with self.agent.errors.quiet("thread excepthook"):
            self.agent.settings.record_exception(
                args.exc_type, args.exc_value, args.exc_traceback, thread=getattr(args.thread, "name", None)
            )
        self._orig_thread_hook(args)

    def _sys_exit(self, code=None):
        if not self.agent.window.stop_requested:
            self.exit_code = code if isinstance(code, int) else (0 if code is None else 1)
            self.exit_reason = "sys.exit"
        return self._orig_exit(code)

    def _atexit(self):
        if self.exit_code is None:
            self.exit_code = 0
            self.exit_reason = self.exit_reason or "end of program"
        self.agent.finalize("exit")
        if self.exit_reason == "window complete" and self.exit_code == 0:
            self._end_without_teardown()

    def _end_without_teardown(self) -> None:
        """We stopped this rank after its window; its record is written and the script's ``finally``
        blocks and later atexit handlers have run.  End here, without the interpreter's teardown of
        torch's C++ objects: with the training loop left mid-way, gloo aborted a rank there (SIGABRT,
        'terminate called without an active exception') after it had left the process group, turning
        a complete capture into a failed run."""
        import logging

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(0)

    def after_fork_in_child(self) -> None:
        """A forked child (fork-start DataLoader worker, os.fork in user code) is not this
        rank: give it back default signal handling and detach it from the rank's files."""
        if os.getpid() == self.agent.pid:
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
        with self.agent.errors.quiet("fork handler"):
            if sys.excepthook == self._excepthook:
                sys.excepthook = self._orig_excepthook
            if threading.excepthook == self._thread_excepthook:
                threading.excepthook = self._orig_thread_hook
            if sys.exit == self._sys_exit:
                sys.exit = self._orig_exit

    # ---------------------------------------------------------------- signals
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
        a = self.agent
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
                a.event("signal", signal=name, step=a.steps, handled_by="watcher thread (main thread blocked)")
                self.exit_reason = f"signal {name}"
                with a.lock:
                    a.finalized = True  # the profiler cannot be stopped from this thread
                self.exit_code = -signum
                # the profiler cannot be stopped from here (its session belongs to the main
                # thread; torch 2.13 finds "no active profiling session" and the process dies)
                a.event("exit", code=-signum, reason=self.exit_reason, steps_completed=a.steps)
                with a.errors.quiet("settings (signal watcher)"):
                    # only what is cached: torch objects may be locked by the blocked main thread
                    a.settings.write(lite=True)
                with a.errors.quiet("re-raising the signal"):
                    import ctypes

                    libc = ctypes.CDLL(None)
                    libc.signal(signum, 0)  # SIG_DFL
                    os.kill(os.getpid(), signum)
                    time.sleep(5)
                os._exit(128 + signum)

    def _on_signal(self, signum, frame):
        a = self.agent
        if os.getpid() != a.pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signal_handled = True
        name = signal.Signals(signum).name
        a.event("signal", signal=name, step=a.steps)
        self.exit_reason = f"signal {name}"
        self.exit_code = 130 if signum == signal.SIGINT else -signum
        a.finalize(f"signal {name}")
        if signum == signal.SIGINT:
            raise KeyboardInterrupt  # where the script was: _excepthook leaves this handler's frame out
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


class Ending:
    def __init__(self, agent, hang_module):
        self.agent = agent
        self._hang = hang_module
        self.hang = None

    def start(self) -> None:
        threading.Thread(target=self._watchdog, name="ddpdoctor-watchdog", daemon=True).start()
        self.hang = self._hang.HangWatch(self.agent)  # stacks of every rank when one waits too long
        self.hang.start()

    # ---------------------------------------------------------------- after the window
    def stop_training(self) -> None:
        """The window is recorded: end this rank with exit code 0.  SystemExit runs the
        user's ``finally`` blocks; a timer makes sure a hung cleanup cannot keep the rank alive."""
        a = self.agent
        if a.window.request_stop():
            a.life.exit_reason = "window complete"
            a.life.exit_code = 0
            a.event(
                "stop", step=a.steps, reason="profiled window complete; ending training (use --keep-going to continue)"
            )
            self._touch(".window_done")
            together = self._wait_for_peers()
            t = threading.Timer(float(a.env.get("DDPDOCTOR_STOP_GRACE_S", "30")), self._force_exit)
            t.daemon = True
            t.start()
            if together:
                atexit.register(self._leave_group_together)
        raise SystemExit(0)

    def _leave_group_together(self) -> None:
        """At exit (after the script's own ``finally`` blocks), tear down the default process group
        the script did not destroy, together: the training loop was left mid-way, so the script's own
        barrier and ``destroy_process_group`` never ran, and gloo aborts a process (SIGABRT,
        'terminate called without an active exception') whose group is still alive when a peer
        exits first (seen once in CI on examples/comm_heavy.py).  A barrier a peer never reaches is
        ended by the grace timer of ``stop_training``.  Runs before the exit handler that writes the
        rank's record (atexit is last in, first out); the settings keep the group's values from
        their earlier copy."""
        torch = self.agent.torch or sys.modules.get("torch")
        with self.agent.errors.quiet("leaving the process group"):
            if torch is None or not torch.distributed.is_available() or not torch.distributed.is_initialized():
                return
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()
            self.agent.event("left_process_group", reason="after the window, together with the other ranks")

    def _wait_for_peers(self) -> bool:
        """Stop together: a rank that ends first can take its peers down with it (Lightning's
        launcher kills the ranks it started when rank 0 raises; a peer still exporting its trace
        finds its collectives' partner gone).  Wait, bounded, until every rank of the world has
        finished its window; peers at the same step are there within milliseconds.  True when they all
        did (then the ranks also leave the process group together, at exit)."""
        a = self.agent
        world = a.world_size
        torch = a.torch or sys.modules.get("torch")
        with a.errors.quiet("world size at stop"):
            if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
                world = max(world, torch.distributed.get_world_size())
        if world <= 1:
            return False
        ranks_dir = os.path.join(a.bundle, "ranks")
        deadline = time.time() + float(a.env.get("DDPDOCTOR_STOP_WAIT_S", "20"))
        missing = list(range(world))
        while time.time() < deadline:
            # ranks recorded in this bundle (a per-node bundle under srun holds only its own)
            missing = [
                r
                for r in range(world)
                if os.path.isdir(os.path.join(ranks_dir, f"rank{r}"))
                and not os.path.exists(os.path.join(ranks_dir, f"rank{r}", ".window_done"))
            ]
            if not missing:
                return True
            time.sleep(0.05)
        a.event("stop_wait", missing_ranks=missing, message="stopping while these ranks had not finished their window")
        return False

    def _force_exit(self):
        self.agent.event("forced_exit", reason="training did not end within the grace period after the window")
        self.agent.finalize("forced exit")
        os._exit(0)

    def _touch(self, name):
        try:
            with open(os.path.join(self.agent.dir, name), "w") as fh:
                fh.write(str(self.agent.steps))
        except OSError as exc:
            self.agent.errors.count(f"writing {name}", exc)

    # ---------------------------------------------------------------- stuck after a peer stopped
    def _watchdog(self):
        """After a peer rank stopped at the end of its window, a rank that makes no progress
        is stuck in a collective the peer will never join (ranks disagree on the step
        count).  Record it and end, rather than hang until the collective timeout."""
        a = self.agent
        peers_dir = os.path.join(a.bundle, "ranks")
        while not a.finalized:
            time.sleep(1.0)
            if a.window.stop_requested or a.window.keep_going or getattr(a.profiler, "exporting", False):
                continue  # (the export of a big trace under load took 57 s: not a hang)
            try:
                done = [
                    d
                    for d in os.listdir(peers_dir)
                    if d != f"rank{a.rank}" and os.path.exists(os.path.join(peers_dir, d, ".window_done"))
                ]
            except OSError:
                continue
            if not done:
                continue
            typical = a.window.typical_step_s()
            idle = a.window.idle_s(time.time())
            if idle > max(float(a.env.get("DDPDOCTOR_STUCK_S", "15")), 10 * typical) and self.main_in_collective():
                a.event(
                    "stuck_after_peer_stop",
                    step=a.steps,
                    peers_done=sorted(done),
                    idle_s=round(idle, 1),
                    message="no step progress since a peer rank finished its profiled window: this rank waits "
                    "for a collective the peer never joins (ranks ran different numbers of steps)",
                )
                a.life.exit_code = 1
                a.life.exit_reason = "stuck after peer stop"
                a.finalize("stuck")
                os._exit(1)

    @staticmethod
    def main_in_collective() -> bool:
        """The main thread is inside torch.distributed / DDP / autograd's backward (where DDP
        all-reduces), not in the script's own code (a long evaluation is not a hang), nor in the
        profiler: torch/autograd/profiler.py is where the window's trace is stopped and exported,
        which took longer than the stuck threshold on a loaded host, and the watchdog then ended a
        healthy rank before its trace was written."""
        frame = sys._current_frames().get(threading.main_thread().ident)
        for _ in range(3):
            if frame is None:
                return False
            name = frame.f_code.co_filename.replace(os.sep, "/")
            if "/torch/profiler/" in name or "/torch/autograd/profiler" in name:
                return False
            if "/torch/distributed/" in name or "/torch/nn/parallel/" in name or "/torch/autograd/" in name:
                return True
            frame = frame.f_back
        return False


def _without_agent_frames(tb):
    """The traceback the user reads, without this folder's frames at its end (the KeyboardInterrupt of Ctrl-C is
    raised in the agent's signal handler, on top of the script's frame it interrupted)."""
    here = os.path.dirname(os.path.abspath(__file__))
    entries = []
    t = tb
    while t is not None:
        entries.append(t)
        t = t.tb_next
    while len(entries) > 1 and os.path.dirname(os.path.abspath(entries[-1].tb_frame.f_code.co_filename)) == here:
        entries.pop()
    try:
        entries[-1].tb_next = None
    except (AttributeError, TypeError, IndexError):
        return tb
    return tb
