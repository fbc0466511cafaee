# expect-verdict: compute
# expect-rule: category:compute
# expect-first-fix: dynamic
"""Cause: the model is compiled with ``torch.compile(model, backend="aot_eager",
dynamic=False)`` (static shapes pinned "for speed"), but the batches are not padded to a
fixed length: each step's token sequences are as long as that batch's longest one, so
nearly every step brings a new sequence length and Dynamo recompiles the graph (trace,
AOT-autograd, forward and backward) before the step can run, until it hits its
recompilation limit. ``aot_eager`` needs no C compiler; a real inductor compile would cost
more per recompilation.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and the
sequence length of each step (``TORCH_LOGS=recompiles`` shows every recompilation and its
guard failure); ``--pad`` pads every batch to 64 tokens (ablation: one compile, then
fast steps).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/compile_recompiles.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

VOCAB, MAXLEN = 1000, 64


class Sentences(Dataset):
    def __init__(self, n=4096):
        g = torch.Generator().manual_seed(0)
        self.lengths = torch.randint(8, MAXLEN + 1, (n,), generator=g).tolist()
        self.tokens = [torch.randint(1, VOCAB, (k,), generator=g) for k in self.lengths]

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return self.tokens[i], self.lengths[i] % 4


def collate(batch, pad_to=None):
    longest = pad_to or max(len(t) for t, _ in batch)
    x = torch.zeros(len(batch), longest, dtype=torch.long)
    for row, (t, _) in enumerate(batch):
        x[row, :len(t)] = t
    return x, torch.tensor([c for _, c in batch])


class TextClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 32, padding_idx=0)
        self.conv = torch.nn.Conv1d(32, 32, 3, padding=1)
        self.head = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))

    def forward(self, x):
        h = self.emb(x).transpose(1, 2)
        h = F.gelu(self.conv(h)).amax(2)
        return self.head(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--pad", action="store_true")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.compile(DDP(TextClassifier()), backend="aot_eager", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Sentences()
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler, drop_last=True,
                        collate_fn=lambda b: collate(b, MAXLEN if args.pad else None))
    times, lengths = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            now = time.perf_counter()
            times.append(now - t_last)
            lengths.append(x.shape[1])
            t_last = now
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        print(f"rank {rank} seq len: " + " ".join(str(k) for k in lengths), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
