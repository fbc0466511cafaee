# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: timeout
"""Cause: the usual "rank 0 prepares the data, the others wait" pattern: rank 0 downloads the
raw shards and builds a tokenized dataset cache, while rank 1 waits in ``dist.barrier()``
for the cache to exist. Building the cache takes longer (~12 s: 16 remote shards, each
fetched and tokenized) than the process group's timeout (``init_process_group(...,
timeout=timedelta(seconds=8))``), so rank 1's barrier times out and rank 1 dies; rank 0
then fails when it reaches the barrier itself. No training step ever runs.

The remote download is modelled with ``time.sleep`` (0.6 s per shard, network latency); the
tokenizing (hashing words into ids) is real CPU work.

Verify (plain torchrun, no ddpdoctor): rank 0 prints its cache progress, rank 1 fails
with a gloo timeout in ``barrier`` after ~8 s; ``--pg-timeout 60`` (ablation) lets the job
train normally.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/barrier_timeout_rank0_preprocess.py
"""

import argparse
import datetime
import os
import random
import tempfile
import time
import zlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

VOCAB, LENGTH, SHARDS = 4096, 32, 16
WORDS = ["the", "model", "data", "train", "rank", "loss", "step", "batch", "token", "cache", "shard", "grad"]


def download_shard(i):
    time.sleep(0.6)                                   # fetching the shard from object storage
    rng = random.Random(i)
    return [" ".join(rng.choice(WORDS) + str(rng.randrange(50)) for _ in range(LENGTH)) for _ in range(256)]


def tokenize(line):
    return [zlib.crc32(w.encode()) % VOCAB for w in line.split()][:LENGTH]


def build_cache(path):
    ids, labels = [], []
    for i in range(SHARDS):
        for line in download_shard(i):
            ids.append(tokenize(line))
            labels.append(len(line) % 2)
        print(f"rank 0: cached shard {i + 1}/{SHARDS}", flush=True)
    torch.save((torch.tensor(ids), torch.tensor(labels)), path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--pg-timeout", type=float, default=8)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    rank = dist.get_rank()
    cache = os.path.join(tempfile.gettempdir(), f"tokcache-{os.environ.get('TORCHELASTIC_RUN_ID', 'local')}.pt")
    if rank == 0:
        build_cache(cache)
    dist.barrier()                                    # the others wait until rank 0 has written the cache
    ids, labels = torch.load(cache)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Embedding(VOCAB, 16), torch.nn.Flatten(),
                                    torch.nn.Linear(16 * LENGTH, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(ids, labels)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()
    if rank == 0:
        os.remove(cache)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
