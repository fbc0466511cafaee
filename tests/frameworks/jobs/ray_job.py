"""Ray Train on CPU: ``TorchTrainer`` with ``ScalingConfig(num_workers=2, use_gpu=False)``, capture switched on
for the workers only through ``ray.init(runtime_env={"env_vars": {"DDPDOCTOR_CAPTURE": DIR}})`` (the README's
recipe).  Ray starts the worker actors first and sets RANK / WORLD_SIZE in them just before its own
``init_process_group``: they become ranks there.  Rank 1 runs a slow pure-Python function every step.

    python ray_job.py --out DIR [--steps 30]
"""

import argparse

import ray
import torch
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model


def slow_feature_hash(n):
    h = 0
    for i in range(n):
        h = (h * 31 + i) % 1_000_003
    return h


def train_func(config):
    rank = ray.train.get_context().get_world_rank()
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for _ in range(config["steps"]):
        if rank == 1:
            slow_feature_hash(config["work"])
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--work", type=int, default=100_000)
    args = p.parse_args()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": {"DDPDOCTOR_CAPTURE": args.out, "DDPDOCTOR_CAPTURE_ANALYZE": "0"}},
    )
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"steps": args.steps, "work": args.work},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
    )
    trainer.fit()
    ray.shutdown()


if __name__ == "__main__":
    main()
