"""PyTorch-Ignite's own launcher: ``idist.Parallel(backend="gloo", nproc_per_node=2)`` spawns the ranks (no
torchrun), ``auto_model`` / ``auto_dataloader`` / ``auto_optim`` wrap DDP, a DistributedSampler and the
optimizer, an ``Engine`` runs the loop.  Rank 1 runs a slow pure-Python function (``slow_feature_hash``)
every step: imbalance on rank 1.

    python ignite_job.py [--port P] [--epochs N]
"""

import argparse

import ignite.distributed as idist
import torch
from ignite.engine import Engine
from torch.utils.data import TensorDataset


def slow_feature_hash(n):
    h = 0
    for i in range(n):
        h = (h * 31 + i) % 1_000_003
    return h


def training(local_rank, config):
    rank = idist.get_rank()
    torch.set_num_threads(1)  # one intra-op thread per rank, as torchrun's OMP_NUM_THREADS=1 gives its ranks
    torch.manual_seed(0)
    model = idist.auto_model(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    opt = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=0.01))
    data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
    loader = idist.auto_dataloader(data, batch_size=64, num_workers=0, shuffle=True)

    def step(engine, batch):
        x, y = batch
        if rank == 1:
            slow_feature_hash(config["work"])
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    Engine(step).run(loader, max_epochs=config["epochs"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=29531)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--work", type=int, default=300_000)
    args = p.parse_args()
    with idist.Parallel(backend="gloo", nproc_per_node=2, master_port=args.port) as parallel:
        parallel.run(training, {"epochs": args.epochs, "work": args.work})


if __name__ == "__main__":
    main()
