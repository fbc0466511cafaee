# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: -
"""Cause: per-class accuracy is summed over the ranks every ``--log-every`` (8) steps with
``dist.all_reduce(per_class_correct)``, where the tensor has one entry per class *seen in
the local shard* (``len(shard_classes)``). Each rank holds its own pre-split shard, and
rank 1's shard happens to hold no sample of class 9, so rank 0 all-reduces 10 elements and
rank 1 only 9. The collective's sizes do not match on the two ranks and the job fails at
step 8. Gloo does not report a size mismatch: the two ranks wait in that all-reduce for
data that never comes until rank 0's 15 s process-group timeout fires, and rank 1 then
loses its peer.

Verify (plain torchrun, no ddpdoctor): both ranks print the class counts they all-reduce
and the job fails ~15 s after step 8 with the gloo errors; ``--fixed-classes`` (ablation) sizes the
tensor by the global class count on both ranks and trains normally.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/collective_shape_mismatch.py
"""

import argparse
import datetime

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

NUM_CLASSES = 10


def load_shard(rank, n=2048):
    g = torch.Generator().manual_seed(200 + rank)
    y = torch.randint(0, NUM_CLASSES if rank == 0 else NUM_CLASSES - 1, (n,), generator=g)
    return TensorDataset(torch.randn(n, 512, generator=g) + y[:, None] / 10, y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--log-every", type=int, default=8)
    p.add_argument("--fixed-classes", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, NUM_CLASSES))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    shard = load_shard(rank)
    shard_classes = NUM_CLASSES if args.fixed_classes else len(torch.unique(shard.tensors[1]))
    loader = DataLoader(shard, batch_size=128, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(rank))
    correct = torch.zeros(shard_classes)
    step = 0
    for epoch in range(1000):
        for x, y in loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            hits = logits.argmax(1) == y
            correct += torch.bincount(y[hits], minlength=shard_classes)[:shard_classes].float()
            step += 1
            print(f"rank {rank}: step {step} loss {loss.item():.3f}", flush=True)
            if step % args.log_every == 0:
                print(f"rank {rank}: all-reducing per-class counts of {correct.numel()} classes", flush=True)
                dist.all_reduce(correct)
                correct.zero_()
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
