"""Overhead of the window evidence (stack sampler + contention probes) on a CPU training loop.

Runs the same single-process training loop in alternating blocks with the evidence window
on (the sampler at DDPDOCTOR_SAMPLE_HZ, default 100) and off, and prints steps/s of each
and the median slowdown.  Alternating blocks cancel most of the drift of a shared machine.

    python benchmarks/sampler_overhead.py [--blocks 12] [--block-s 1.0] [--hz 100] [--workload small|matmul]
        [--gil [--baseline none|sampler]]

``--gil``: the "on" blocks also record every garbage collection and the sampler's gaps
(capture/agent/gil.py; ``--native``: with faulthandler's C watchdog re-armed at every sample); ``--baseline sampler``:
the "off" blocks run the stack sampler alone, so the slowdown is what the GIL evidence adds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from ddpdoctor.capture.agent import evidence as agent_evidence
from ddpdoctor.capture.agent import gil as agent_gil
from ddpdoctor.capture.agent import stacks as agent_stacks


def make_step(workload: str):
    torch.manual_seed(0)
    if workload == "small":  # many small ops and Python work per step: the GIL is busy
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    else:  # a few large matmuls: the GIL is mostly released
        model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
        x, y = torch.randn(256, 1024), torch.randint(0, 10, (256,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        xx = x
        if workload == "small":
            for _ in range(20):
                xx = xx * 0.999 + 0.001
        loss = torch.nn.functional.cross_entropy(model(xx), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


CPU_PER_STEP: dict[bool, list[float]] = {True: [], False: []}


def run_block(step, n: int, evidence, on: bool) -> tuple[float, dict | None]:
    """n steps; returns steps/s (a fixed step count: no partial-step quantization) and keeps
    the training thread's own CPU time per step (less sensitive to other processes' load)."""
    if evidence is not None:
        evidence.window_start(torch, 0)
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        step()
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    CPU_PER_STEP[on].append(cpu / n)
    rec = None
    if evidence is not None:
        evidence.window_stop(n)
        rec = evidence.record()
    return n / wall, rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--block-s", type=float, default=1.0)
    ap.add_argument("--hz", type=float, default=100.0)
    ap.add_argument("--workload", choices=("small", "matmul"), default="small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gil", action="store_true", help="the on blocks also record GC pauses and the sampler's gaps")
    ap.add_argument("--baseline", choices=("none", "sampler"), default="none")
    ap.add_argument(
        "--native", action="store_true", help="with --gil: DDPDOCTOR_NATIVE_SAMPLER=1 (the C watchdog's alarm)"
    )
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ddpdoctor-overhead-")
    torch.set_num_threads(a.threads)
    step = make_step(a.workload)
    t0 = time.perf_counter()
    for _ in range(20):
        step()
    n = max(5, round(a.block_s * 20 / (time.perf_counter() - t0)))  # steps per block
    env = dict(os.environ, DDPDOCTOR_SAMPLE_HZ=str(a.hz))
    if a.native:
        env["DDPDOCTOR_NATIVE_SAMPLER"] = "1"
    on, off, ratios, samples, sampler_cpu, per_sample_us = [], [], [], [], [], []
    dumps = []

    def evidence(on: bool):
        if on and a.gil:
            return agent_evidence.Evidence(env, agent_stacks, agent_gil, work_dir=work)
        return agent_evidence.Evidence(env, agent_stacks) if on or a.baseline == "sampler" else None

    for _ in range(a.blocks):
        r_off, _ = run_block(step, n, evidence(False), False)
        r_on, rec = run_block(step, n, evidence(True), True)
        if a.gil:
            dumps.append(rec["gil"]["native"].get("dumps", 0) / rec["contention"]["wall_s"])
        off.append(r_off)
        on.append(r_on)
        ratios.append(r_on / r_off)
        stacks = rec["stacks"]
        samples.append(stacks.get("samples", 0) / rec["contention"]["wall_s"])
        sampler_cpu.append((stacks.get("sampler_cpu_s") or 0.0) / rec["contention"]["wall_s"])
        if stacks.get("samples"):
            per_sample_us.append(1e6 * stacks["sampler_busy_s"] / stacks["samples"])
    print(
        f"workload={a.workload} threads={a.threads} hz={a.hz} blocks={a.blocks}x{a.block_s}s "
        f"on={'sampler+gil' + ('+native' if a.native else '') if a.gil else 'sampler'} off={'sampler' if a.baseline == 'sampler' else 'nothing'}"
    )
    if dumps:
        print(f"faulthandler dumps/s: {statistics.median(dumps):.1f}")
    print(
        f"steps/s off: median {statistics.median(off):.1f} best {max(off):.1f}   "
        f"on: median {statistics.median(on):.1f} best {max(on):.1f}   ({n} steps per block)"
    )
    print(f"slowdown of the best blocks (least disturbed by other load): {100 * (1 - max(on) / max(off)):.2f} %")
    print(
        f"slowdown (1 - on/off, median of paired blocks): {100 * (1 - statistics.median(ratios)):.2f} %"
        f"   (paired-block spread: {100 * (1 - max(ratios)):.2f} .. {100 * (1 - min(ratios)):.2f} %)"
    )
    cpu_on, cpu_off = statistics.median(CPU_PER_STEP[True]), statistics.median(CPU_PER_STEP[False])
    print(
        f"training thread CPU per step: off {1e3 * cpu_off:.3f} ms, on {1e3 * cpu_on:.3f} ms "
        f"({100 * (cpu_on / cpu_off - 1):+.2f} %)"
    )
    print(
        f"samples/s achieved: {statistics.median(samples):.1f}   sampler thread CPU: "
        f"{100 * statistics.median(sampler_cpu):.2f} % of one core;   one sample holds the GIL "
        f"{statistics.median(per_sample_us):.1f} µs (x rate = {statistics.median(per_sample_us) * a.hz / 1e4:.2f} %"
        f" of the training thread's time at most, before GIL hand-off costs)"
    )


if __name__ == "__main__":
    main()
