# expect-verdict: dataloader
# expect-rule: category:dataloader
# expect-first-fix: stack
"""Cause: a keyword-spotting job whose hand-written ``collate_fn`` builds the batch with
``torch.tensor([features for features, _ in batch])``: a Python list of 48 numpy arrays
(40 mel bands x 64 frames each). ``torch.tensor`` does not see one buffer there; it walks the
nested sequence element by element (~123 K Python-level float conversions per batch), which
PyTorch itself warns about ("Creating a tensor from a list of numpy.ndarrays is extremely slow.
Please consider converting the list to a single numpy.ndarray with numpy.array() before
converting to a tensor."). ``num_workers=0``, so the collate runs in the training process and
every step waits for it. The fix is one line: ``torch.from_numpy(np.stack(features))``.

Both ranks are equally slow (not imbalance), the model is a small 1-D CNN (4.9 K parameters:
neither compute- nor communication-bound): dataloader-bound.

Source: the UserWarning in torch/csrc/utils/tensor_new.cpp quoted above; PyTorch forums
"Creating a tensor from a list of numpy.ndarrays is extremely slow"; DataLoader docs on
``collate_fn``.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank median step time and the
median time spent in ``next(loader)`` (collate included); ``--fixed`` (ablation) collates
with ``np.stack``.
Measured on 2026-11-28 (torch 2.13.0+cpu, 2-core host shared with ~7 other helpers, load average
~14): median step 83.5 / 82.7 ms (rank 0 / rank 1), ``next(loader)`` 54.4 / 57.1 ms;
``--fixed`` 27.9 / 26.9 ms, ``next(loader)`` 0.3 ms: 3.0x. Default run 33 s wall.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/b5_tensor_from_ndarray_list.py --report
"""

import argparse
import statistics
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class MelClips(Dataset):
    """Precomputed log-mel features, one (40, 64) float32 array per clip."""

    def __init__(self, n=6144, seed=0):
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, 12, n)
        self.clips = [rng.standard_normal((40, 64)).astype(np.float32) for _ in range(n)]

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, i):
        return self.clips[i], int(self.labels[i])


def collate_slow(batch):
    features = [f for f, _ in batch]
    return torch.tensor(features), torch.tensor([y for _, y in batch])


def collate_stacked(batch):
    features = [f for f, _ in batch]
    return torch.from_numpy(np.stack(features)), torch.tensor([y for _, y in batch])


def make_model():
    return nn.Sequential(nn.Conv1d(40, 24, 3, padding=1), nn.ReLU(), nn.Conv1d(24, 24, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(24, 12))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--report", action="store_true")
    p.add_argument("--fixed", action="store_true", help="ablation: np.stack in collate")
    args = p.parse_args()
    warnings.filterwarnings("once", category=UserWarning)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(make_model())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = MelClips()
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=48, sampler=sampler, drop_last=True, num_workers=0,
                        collate_fn=collate_stacked if args.fixed else collate_slow)
    step_ms, load_ms = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        it = iter(loader)
        while step < args.steps:
            t0 = time.perf_counter()
            batch = next(it, None)
            if batch is None:
                break
            load_ms.append(1000 * (time.perf_counter() - t0))
            x, y = batch
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            now = time.perf_counter()
            step_ms.append(1000 * (now - t_last))
            t_last = now
            step += 1
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank}: median step {statistics.median(step_ms[5:]):.1f} ms, "
              f"median next(loader) {statistics.median(load_ms[5:]):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
