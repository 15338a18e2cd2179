"""Exact DDP evaluation (tasks/common/ddp_eval.py): every val/test example scored once, in the
single-process batches, so a 2-process run reports what one process measures."""
from __future__ import annotations

import json
import re

import pytest

from tasks.common.ddp_eval import BatchAlignedSampler, single_process_batches
from tasks.common.errors import ConfigError

from framework_helpers import compose, run_cli

# 37 examples in batches of 8: 5 batches, the last of 5 examples; not divisible by 2 x 8, so
# Lightning's DistributedSampler pads it to 38 (example 0 scored twice)
EVAL = ["task.datamodule.num_val=37", "task.datamodule.num_test=37", "task.datamodule.batch_size=8"]
TOY = ["task=toy_recall", "trainer.max_steps=3", "task.datamodule.num_train=64",
       "backbone.d_model=32", "backbone.n_heads=2", "logger.wandb=false", *EVAL]


def test_batch_aligned_sampler_scores_each_example_once_in_single_process_batches():
    base = list(range(37))
    want = single_process_batches(base, 8, drop_last=False)
    got = []
    for rank in range(2):
        idx = list(BatchAlignedSampler(base, 8, False, 2, rank))
        got += [idx[i:i + 8] for i in range(0, len(idx), 8)]  # what the DataLoader batches
    assert sorted(got) == sorted(want) and sum(map(len, got)) == 37


def test_exact_loader_gives_each_rank_whole_single_process_batches():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from tasks.common.ddp_eval import exact_loader
    dl = DataLoader(TensorDataset(torch.arange(37)), batch_size=8)
    single = [b[0].tolist() for b in dl]
    ranks = [[b[0].tolist() for b in exact_loader(dl, 2, r)] for r in (0, 1)]
    assert ranks == [single[0::2], single[1::2]]
    shuffled = DataLoader(TensorDataset(torch.arange(37)), batch_size=8, shuffle=True)
    assert exact_loader(shuffled, 2, 0) is shuffled  # left to Lightning: ranks would disagree


def test_batch_aligned_sampler_limit_is_the_single_process_batches_and_too_few_is_an_error():
    ranks = [list(BatchAlignedSampler(list(range(37)), 8, False, 2, r, limit=3)) for r in (0, 1)]
    assert sorted(ranks[0] + ranks[1]) == list(range(24))  # batches 0..2, not 3 per rank
    with pytest.raises(ConfigError, match="fewer than the 4 DDP processes"):
        BatchAlignedSampler(list(range(37)), 16, False, 4, 0)  # 3 batches, 4 ranks


@pytest.mark.slow  # 60-82 s on 2 busy cores (17 s CPU): two ranks each import and compose
def test_ddp_two_process_metrics_equal_one_process_evaluation_of_the_checkpoint(tmp_path):
    """A real 2-process gloo DDP run on CPU; its JSON's val/test metrics must equal a
    single-process evaluation of the checkpoint it reports. Fails with Lightning's padded
    DistributedSampler (example 0 scored twice: loss and accuracy differ)."""
    import lightning as L

    from tasks.common.runner import build
    r = run_cli([*TOY, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"], tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = list((tmp_path / "results" / "runs").rglob("*.json"))
    assert len(out) == 1, out
    payload = json.loads(out[0].read_text())
    assert payload["device"] == "cpu x2"
    reported = payload["metrics"]["reported"]

    cfg = compose(TOY)
    dm, _, module = build(cfg)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    ckpt = f"{payload['run_dir']}/checkpoints/best.ckpt"
    single = {}
    for fn in (trainer.validate, trainer.test):
        fn(module, datamodule=dm, ckpt_path=ckpt, verbose=False)
        single.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    keys = [k for k in single if k.startswith(("val/", "test/"))]
    assert {"val/loss", "val/acc", "test/loss", "test/acc", "test/acc_micro"} <= set(keys)
    for k in keys:
        assert reported[k] == pytest.approx(single[k], rel=1e-5, abs=1e-7), k
    steps = re.findall(r"\] step (\d+)/", r.stdout + r.stderr)
    assert steps and len(steps) == len(set(steps)), steps  # progress lines from rank 0 only
