"""What the DataLoader worker probe (ddpdoctor/capture/agent/loader_workers.py) costs a worker: one process,
no DDP, a DataLoader whose 2 fork-start workers compute per sample (a pure-Python loop: the case where the
sampler thread competes with the worker's main thread for the GIL) or sleep per sample (waiting), timed
over the same batches with the probe on and off, alternated; plus the probe's file size per worker-second.

    PYTHONPATH=$PWD python benchmarks/bench_loader_worker_probe.py --rounds 5

Prints per mode the median seconds per batch with and without the probe and their ratio, and the workers'
CPU per batch (RUSAGE_CHILDREN over the workers' lives: the probe's own CPU whatever the host's load).
"""

import argparse
import gc
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils import worker as torch_worker

from ddpdoctor.capture.agent.loader_workers import WorkerProbe


class Work(Dataset):
    def __init__(self, mode: str, per_sample_ms: float):
        self.mode, self.s = mode, per_sample_ms / 1000

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        if self.mode == "sleep":
            time.sleep(self.s)
        else:
            t_end = time.thread_time() + self.s
            x = 0
            while time.thread_time() < t_end:
                x += 1
        return torch.zeros(4), i


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(mode: str, probe_dir: str | None, batches: int) -> tuple[float, float]:
    """(wall seconds per batch, the workers' CPU seconds per batch over their whole life)."""
    orig = torch_worker._worker_loop
    if probe_dir is not None:
        probe = WorkerProbe(probe_dir, env={})

        def loop(*args):
            new_args, _ = probe.worker_args(orig, args, {})
            return orig(*new_args)

        torch_worker._worker_loop = loop
    try:
        c0 = _children_cpu()
        loader = DataLoader(Work(mode, 2.0), batch_size=8, num_workers=2, multiprocessing_context="fork")
        it = iter(loader)
        for _ in range(4):  # the workers' start and their first batches
            next(it)
        t0 = time.perf_counter()
        for _ in range(batches):
            next(it)
        dt = (time.perf_counter() - t0) / batches
        it._shutdown_workers()
        del it
        gc.collect()
        return dt, (_children_cpu() - c0) / (batches + 4)
    finally:
        torch_worker._worker_loop = orig


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batches", type=int, default=40)
    args = p.parse_args()
    for mode in ("compute", "sleep"):
        on, off, cpu_on, cpu_off = [], [], [], []
        with tempfile.TemporaryDirectory() as d:
            for r in range(args.rounds):
                for probe_dir, wall, cpu in ((None, off, cpu_off), (str(Path(d) / f"r{r}"), on, cpu_on)):
                    w, c = timed(mode, probe_dir, args.batches)
                    wall.append(w)
                    cpu.append(c)
            size = sum(f.stat().st_size for f in Path(d).rglob("*.jsonl"))
        m_on, m_off = statistics.median(on), statistics.median(off)
        print(
            f"{mode}: {1000 * m_off:.2f} ms/batch without the probe, {1000 * m_on:.2f} ms with "
            f"(ratio {m_on / m_off:.3f}; rounds off {[round(1000 * x, 1) for x in off]}, on "
            f"{[round(1000 * x, 1) for x in on]}); workers' CPU per batch {1000 * statistics.median(cpu_off):.2f} ms "
            f"without, {1000 * statistics.median(cpu_on):.2f} ms with; probe files {size / 1024:.0f} KiB in all"
        )


if __name__ == "__main__":
    main()
