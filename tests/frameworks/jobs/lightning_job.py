"""Lightning job, launched the way Lightning's docs show: `python lightning_job.py` with
Trainer(devices=2, strategy="ddp", accelerator="cpu"); Lightning starts rank 1 itself.
Injected cause: DDPStrategy(find_unused_parameters=True) although every parameter is used.
Gradient accumulation: accumulate_grad_batches=4."""

import sys

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def training_step(self, batch, _i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Data(L.LightningDataModule):
    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        ds = TensorDataset(torch.randn(2048, 32, generator=g), torch.randn(2048, 1, generator=g))
        return DataLoader(ds, batch_size=8, shuffle=True)


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    torch.set_num_threads(1)
    trainer = L.Trainer(
        devices=2,
        accelerator="cpu",
        strategy=DDPStrategy(find_unused_parameters=True),
        accumulate_grad_batches=4,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(), datamodule=Data())
