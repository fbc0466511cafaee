"""Part of the capture agent: torch.profiler over the step window -- the side
of the window that touches torch.  The agent starts and stops it where the step window
(``window.py``) says; this part starts the profiler with ``ProfilerStep#N`` marks, exports one
gzipped trace and says so in the event log.  torch is the module the script imported, never imported
here first.
"""

from __future__ import annotations

import os
import sys
import time

from . import span as _span


class WindowProfiler:
    def __init__(self, agent):
        self.agent = agent
        self.prof = None  # the running torch.profiler.profile, ours
        self.trace_name = f"rank{agent.rank}.pt.trace.json.gz"
        self.trace_written = None
        self.exporting = False  # stopping and writing the trace (seconds to a minute under load)
        self.step_span = None  # the open ProfilerStep#N span of a manual window

    def other_profiler_running(self) -> bool:
        """torch's autograd profiler is already on: the script runs its own."""
        with self.agent.errors.quiet("profiler check"):
            import torch.autograd.profiler as ap

            return bool(getattr(ap, "_is_profiler_enabled", False))
        return False

    def start(self, torch) -> None:
        """The window starts at the boundary that completed the warm-up steps."""
        a = self.agent
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
        if self.other_profiler_running():
            a.user_profiler_starts()
            return
        steps = a.window.steps
        manual = a.window.manual
        if not manual:
            self._agree_length(torch)
        a.settings.window_autograd(torch, measure=True)  # the recorded steps' autograd mode (timed before the trace)
        prof = profile(activities=acts, record_shapes=True, with_stack=False, profile_memory=False)
        prof._ddpdoctor_own = True
        prof.record_steps = not manual  # without a schedule profile() would not mark ProfilerStep#N
        prof.step_num = steps  # ProfilerStep#<number of the step being recorded>
        prof.start()
        self.prof = prof
        if manual:
            self._open_step(torch)
        a.window.started()
        a.loader_timing.window_start()
        a._evidence_hook(
            "window_start", torch, steps, a.window.typical_step_s() if a.window.step_times else None, a.window.active
        )
        a.event("profiler_start", step=steps, activities=[str(x).split(".")[-1] for x in acts])
        try:
            a.settings.write()  # early copy: a hang or SIGKILL later still leaves the settings
        except Exception as exc:
            a.internal_error("settings", exc)

    def _agree_length(self, torch) -> None:
        """At least ``--active`` steps and at least DDPDOCTOR_MIN_WINDOW_S of training, the same on every
        rank (``span.py``)."""
        a, w = self.agent, self.agent.window
        try:
            times = sorted(w.step_time_values()[-20:])  # the first step (the script's setup) left out
            typical = times[len(times) // 2] if times else None
            proposed = _span.steps_for(w.active, typical, _span.min_window_s(a.env))
            w.requested_active = w.active
            w.active, w.active_decided_by = _span.agreed_steps(torch, a.env, proposed, w.active)
        except Exception as exc:
            a.internal_error("window length", exc)

    def step(self) -> None:
        if self.step_span is None:  # the automatic window: torch.profiler marks the steps
            self.prof.step()
            return
        self.step_span.__exit__(None, None, None)
        self.prof.step_num += 1
        self._open_step(self.agent.torch or sys.modules.get("torch"))

    def _open_step(self, torch) -> None:
        """A window the script marks (window.py ``manual``): the ProfilerStep#N spans are ours, so the
        span after the last boundary (until the script's block ended: not a whole step) is taken out of
        the exported trace (``_drop_span``) rather than counted as a short step."""
        span = torch.profiler.record_function(f"ProfilerStep#{self.prof.step_num}")
        span.__enter__()
        self.step_span = span

    def stop(self, complete: bool, drop_open_step: bool = False) -> None:
        """Stop and export: at the window's end (``complete``), or when the rank ends inside it
        (``drop_open_step``: the step open at that moment holds the script's end, not a training step)."""
        prof, self.prof = self.prof, None
        if prof is None:
            return
        self.exporting = True
        try:
            self._stop_and_export(prof, complete, drop_open_step)
        finally:
            self.exporting = False

    def _stop_and_export(self, prof, complete: bool, drop_open_step: bool = False) -> None:
        a = self.agent
        a._evidence_hook("window_stop", a.window.recorded)
        try:
            main = max(a.settings.loaders, key=lambda x: x[1].get("batches", 0))[1] if a.settings.loaders else {}
            a.loader_timing.window_stop(main.get("num_workers"))
        except Exception as exc:
            a.internal_error("loader window", exc)
        a.window.stopped()
        t0 = time.time()
        open_span, self.step_span = self.step_span, None
        try:
            if open_span is not None:
                with a.errors.quiet("closing the last step span"):
                    open_span.__exit__(None, None, None)
            prof.stop()
        finally:
            t1 = time.time()
            path = os.path.join(a.dir, self.trace_name)
            raw, tmp = path + ".tmp.json", path + ".tmp.gz"
            # plain JSON first, then gzip at level 1: torch's own .gz export compresses at level 9,
            # which took most of the export time (e.g. 5.1 s of a 0.9 MB trace's export)
            prof.export_chrome_trace(raw)
            if open_span is not None or drop_open_step:
                with a.errors.quiet("trimming the window's tail"):
                    _drop_span(raw, f"ProfilerStep#{prof.step_num}")
            t2 = time.time()
            import gzip
            import shutil

            with open(raw, "rb") as fin, gzip.open(tmp, "wb", compresslevel=1) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
            os.remove(raw)
            os.replace(tmp, path)
            self.trace_written = self.trace_name
            t3 = time.time()
            a.event(
                "trace",
                file=self.trace_name,
                steps=a.window.recorded,
                complete=complete,
                export_s=round(t3 - t0, 3),
                stop_s=round(t1 - t0, 3),
                save_s=round(t2 - t1, 3),
                compress_s=round(t3 - t2, 3),
            )

    # ---------------------------------------------------------------- a window the script marks
    def take_manual_window(self) -> bool:
        """``ddpdoctor.capture.window`` is in use: no automatic window (False if one already ran)."""
        a = self.agent
        if a.window.manual:
            return True
        with a.lock:
            taken = a.window.take_manual()
        if taken:
            a.event("window_marked_by_script", step=a.steps)
        return taken

    def mark_window_start(self) -> bool:
        """The script's ``with window():`` begins: profile from here; True when recording."""
        a = self.agent
        if not a.window.manual and not self.take_manual_window():
            a.event("window_mark_ignored", step=a.steps, reason="the automatic window already ran")
            return False
        torch = a.torch or sys.modules.get("torch")
        if a.window.profiling or a.window.window_done or torch is None:
            return False
        try:
            self.start(torch)
        except Exception as exc:
            a.internal_error("window start (script)", exc)
        return a.window.profiling

    def mark_window_end(self) -> None:
        """The script's block ends: stop and export; the steps inside it are the window. Training goes on."""
        a = self.agent
        if not (a.window.manual and a.window.profiling):
            return
        try:
            self.stop(complete=True)
            a.settings.write()
        except Exception as exc:
            a.internal_error("window end (script)", exc)


def _drop_span(path: str, name: str) -> None:
    """Remove the host span called ``name`` from an exported chrome trace (a manual window's tail)."""
    import json

    with open(path, encoding="utf-8") as fh:
        trace = json.load(fh)
    events = trace.get("traceEvents") or []
    trace["traceEvents"] = [e for e in events if not (e.get("name") == name and e.get("ph") == "X")]
    if len(trace["traceEvents"]) != len(events):
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(trace, fh)
