"""FSDP job on CPU/gloo, launched with torchrun (`fsdp_job.py fsdp1|fsdp2|ddp [steps]`): FSDP1 (FullyShardedDataParallel with an auto
wrap policy) or FSDP2 (fully_shard per block, then the root).  Injected cause: rank 1 gets
sequences 16x longer than rank 0 (uneven work, larger than what a loaded host adds at random)."""

import sys

import torch
import torch.distributed as dist


class Block(torch.nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=128, d=64, n=2):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(n))
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def wrap(model, kind):
    if kind == "ddp":  # the same job under DDP, for comparison
        return torch.nn.parallel.DistributedDataParallel(model)
    if kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        return FullyShardedDataParallel(
            model,
            auto_wrap_policy=ModuleWrapPolicy({Block}),
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            device_id=torch.device("cpu"),
        )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for b in model.blocks:
        fully_shard(b, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh)
    return model


if __name__ == "__main__":
    kind = sys.argv[1] if len(sys.argv) > 1 else "fsdp2"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 14
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = wrap(TinyLM(), kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    length = 1024 if rank == 1 else 64  # the injected cause: rank 1's inputs are 16x longer
    g = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        ids = torch.randint(0, 128, (8, length), generator=g)
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 128), ids.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.barrier()  # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()
