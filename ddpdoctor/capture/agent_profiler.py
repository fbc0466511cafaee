"""Part of the capture agent (loaded by path beside it): torch.profiler over the step window -- the side
of the window that touches torch.  The agent starts and stops it where the step window
(``agent_window.py``) says; this part starts the profiler with ``ProfilerStep#N`` marks, exports one
gzipped trace and says so in the event log.  torch is the module the script imported, never imported
here first.
"""

from __future__ import annotations

import os
import time


class WindowProfiler:
    def __init__(self, agent):
        self.agent = agent
        self.prof = None                  # the running torch.profiler.profile, ours
        self.trace_name = f"rank{agent.rank}.pt.trace.json.gz"
        self.trace_written = None

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
        prof = profile(activities=acts, record_shapes=True, with_stack=False, profile_memory=False)
        prof._ddpdoctor_own = True
        prof.record_steps = True                # without a schedule profile() would not mark ProfilerStep#N
        prof.step_num = steps                   # ProfilerStep#<number of the step being recorded>
        prof.start()
        self.prof = prof
        a.window.started()
        a.loader_timing.window_start()
        a._evidence_hook("window_start", torch, steps, a.window.typical_step_s() if a.window.step_times else None,
                          a.window.active)
        a.event("profiler_start", step=steps, activities=[str(x).split(".")[-1] for x in acts])
        try:
            a.settings.write()            # early copy: a hang or SIGKILL later still leaves the settings
        except Exception as exc:  # noqa: BLE001
            a.internal_error("settings", exc)

    def step(self) -> None:
        self.prof.step()

    def stop(self, complete: bool) -> None:
        """Stop and export: at the window's end (``complete``), or when the rank ends inside it."""
        prof, self.prof = self.prof, None
        if prof is None:
            return
        a = self.agent
        a._evidence_hook("window_stop", a.window.recorded)
        try:
            main = max(a.settings.loaders, key=lambda x: x[1].get("batches", 0))[1] if a.settings.loaders else {}
            a.loader_timing.window_stop(main.get("num_workers"))
        except Exception as exc:  # noqa: BLE001
            a.internal_error("loader window", exc)
        a.window.stopped()
        t0 = time.time()
        try:
            prof.stop()
        finally:
            t1 = time.time()
            path = os.path.join(a.dir, self.trace_name)
            raw, tmp = path + ".tmp.json", path + ".tmp.gz"
            # plain JSON first, then gzip at level 1: torch's own .gz export compresses at level 9,
            # which took most of the export time (e.g. 5.1 s of a 0.9 MB trace's export)
            prof.export_chrome_trace(raw)
            t2 = time.time()
            import gzip
            import shutil

            with open(raw, "rb") as fin, gzip.open(tmp, "wb", compresslevel=1) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
            os.remove(raw)
            os.replace(tmp, path)
            self.trace_written = self.trace_name
            t3 = time.time()
            a.event("trace", file=self.trace_name, steps=a.window.recorded, complete=complete,
                    export_s=round(t3 - t0, 3), stop_s=round(t1 - t0, 3), save_s=round(t2 - t1, 3),
                    compress_s=round(t3 - t2, 3))
