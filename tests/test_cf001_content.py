"""CF001 from content (issue #25 part 5): ranks that load the same dataset and shuffle it with different
seeds receive different first batches, yet each walks the whole dataset every epoch.  The capture hashes a
few fixed items of the dataset (random generators seeded alike, then restored) and records how many samples
one epoch yields; CF001 fires on the same data walked whole on every rank, whatever the seeds, and stays
quiet for per-rank datasets and for loaders something shards.  Units, then real 2-rank runs."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.bundle.loader import dataset_facts

ROOT = Path(__file__).resolve().parents[1]


def _dl(n=100, per_epoch=100, fp="TensorDataset:100:abc"):
    d = {"dataset_len": n, "samples_per_epoch": per_epoch}
    if fp is not None:
        d["dataset_fingerprint"] = fp
    return {"dataloader": d}


def test_same_fingerprints_and_whole_epochs():
    assert dataset_facts({0: _dl(), 1: _dl()}) == {"data.whole_dataset_per_rank": True, "data.same_dataset": True}


def test_different_data_per_rank():
    f = dataset_facts({0: _dl(fp="A:100:1"), 1: _dl(fp="A:100:2")})
    assert f == {"data.whole_dataset_per_rank": True, "data.same_dataset": False}


def test_a_rank_whose_epoch_is_a_part_is_not_the_same_walk():
    f = dataset_facts({0: _dl(per_epoch=50, fp=None), 1: _dl(per_epoch=50, fp=None)})
    assert f == {"data.whole_dataset_per_rank": False, "data.same_dataset": False}


def test_one_rank_or_an_unreadable_dataset_says_nothing_about_sameness():
    assert dataset_facts({0: _dl()}) == {}
    assert "data.same_dataset" not in dataset_facts({0: _dl(), 1: _dl(fp=None) | {}})
    broken = {0: _dl(), 1: {"dataloader": {"dataset_len": 100, "samples_per_epoch": 100, "dataset_fingerprint": None}}}
    assert "data.same_dataset" not in dataset_facts(broken)


def test_fingerprint_ignores_the_ranks_seeds_and_restores_them():
    torch = pytest.importorskip("torch")
    from ddpdoctor.capture.agent import evidence as agent_evidence
    from ddpdoctor.capture.agent import loader as agent_loader

    class Augmented(torch.utils.data.Dataset):
        def __init__(self, seed):
            self.x = torch.randn(10, 4, generator=torch.Generator().manual_seed(seed))

        def __len__(self):
            return 10

        def __getitem__(self, i):
            return self.x[i] + torch.randn(4) * random.random()

    fps = []
    for rank in (0, 1):
        torch.manual_seed(rank)
        random.seed(rank)
        before = (torch.random.get_rng_state().clone(), random.getstate())
        fps.append(agent_loader.dataset_fingerprint(Augmented(7), 10, torch, agent_evidence.batch_fingerprint))
        assert torch.equal(torch.random.get_rng_state(), before[0]) and random.getstate() == before[1]
    assert fps[0] == fps[1] and fps[0].startswith("Augmented:10:")
    other = agent_loader.dataset_fingerprint(Augmented(8), 10, torch, agent_evidence.batch_fingerprint)
    assert other != fps[0]


def test_samples_per_epoch():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    from ddpdoctor.capture.agent.loader import samples_per_epoch

    ds = TensorDataset(torch.zeros(10, 2))
    assert samples_per_epoch(DataLoader(ds, batch_size=3, shuffle=True)) == 10
    assert samples_per_epoch(DataLoader(ds, batch_size=3, sampler=DistributedSampler(ds, 2, 0))) == 5
    custom = DataLoader(ds, batch_sampler=[[0, 1], [2, 3]])
    assert samples_per_epoch(custom) is None


# ------------------------------------------------------------------ real 2-rank runs


@pytest.mark.live
@pytest.mark.parametrize(
    "job, fires",
    [
        ("tests/scripts/unsharded_shuffle_seeds.py", True),
        ("examples/scenarios/no_distributed_sampler.py", True),
        ("examples/scenarios/per_rank_shards.py", False),
    ],
)
def test_cf001_on_real_runs(tmp_path, job, fires):
    pytest.importorskip("torch")
    out, js = tmp_path / "b", tmp_path / "d.json"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--warmup",
            "2",
            "--active",
            "3",
            "--out",
            str(out),
            "--json",
            str(js),
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(ROOT / job),
            "--steps",
            "8",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(js.read_text())
    facts = doc["facts"]
    rules = [f["rule"] for f in doc["findings"]]
    assert ("CF001" in rules) == fires, (rules, {k: v for k, v in facts.items() if k.startswith("data.")})
    assert facts["data.whole_dataset_per_rank"] is True
    assert facts["data.same_dataset"] is fires
    if job.endswith("unsharded_shuffle_seeds.py"):
        assert facts["data.same_first_batches"] is False  # the old evidence alone stayed quiet
