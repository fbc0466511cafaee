"""Hugging Face Trainer job: a tiny randomly initialised GPT-2 built from a config (no hub
download), launched with torchrun.  Injected cause: ddp_find_unused_parameters=True although
every parameter is used.  Gradient accumulation: gradient_accumulation_steps=4."""

import os
import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=2048, length=32, vocab=128):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64))
    args = TrainingArguments(
        output_dir=os.path.join(tempfile.gettempdir(), "ddpdoctor-hf-job"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=4,
        max_steps=steps,
        use_cpu=True,
        ddp_backend="gloo",
        ddp_find_unused_parameters=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    Trainer(model=model, args=args, train_dataset=Tokens()).train()
