"""clip_scaled_grads (tasks/common/scaled_clip.py) = the authors' AMP update rule (LJC-FVNR
exp/exp_main.py:339-346): scale(loss).backward(); clip_grad_norm_(params, 1) on the SCALED
gradients; scaler.step (unscale + step); scaler.update. Checked against a hand-written loop."""

import lightning as L
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from omegaconf import OmegaConf

from tasks.common.runner import _trainer_kwargs
from tasks.common.scaled_clip import ScaledClipPrecision

STEPS, LR = 6, 1e-2


def _data():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g))
            for _ in range(STEPS)]


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))


def _adamw(params):
    return torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), weight_decay=0.1)


class _Module(L.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net, self.grad_norms = net, []

    def training_step(self, batch, _):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def on_train_batch_end(self, *_):  # what AdamW received (scaler.step unscaled in place)
        self.grad_norms.append(torch.linalg.vector_norm(
            torch.cat([p.grad.flatten() for p in self.parameters()])).item())

    def configure_optimizers(self):
        return _adamw(self.parameters())


def _lightning(net, plugins):
    module = _Module(net)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=STEPS, gradient_clip_val=1.0,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, plugins=plugins)
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(_data(), batch_size=None))
    return module


def _authors_loop(net):
    """The authors' loop, re-stated (exp_main.py:244, 265, 286-346 with use_amp, accumulation 1)."""
    opt, scaler = _adamw(net.parameters()), torch.amp.GradScaler("cpu")
    for x, y in _data():
        opt.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(net(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
    return net


def test_clip_scaled_grads_gives_the_authors_update():
    ours = _lightning(_net(), [ScaledClipPrecision("cpu")]).net
    theirs = _authors_loop(_net())
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(p, q), name


def test_clipping_the_scaled_gradient_hands_adamw_a_norm_of_one_over_the_scale():
    module = _lightning(_net(), [ScaledClipPrecision("cpu")])
    assert module.grad_norms == pytest.approx([2.0 ** -16] * STEPS, rel=1e-3)
    # Lightning's own fp32 step clips the TRUE gradient (norm ~0.1-1 here): not the same update
    plain = _lightning(_net(), None)
    assert min(plain.grad_norms) > 1e-2
    assert not torch.equal(plain.net[0].weight, module.net[0].weight)


def test_scale_schedule_is_torchs_gradscaler_default():
    s = ScaledClipPrecision("cpu").scaler
    assert (s.get_scale(), s.get_growth_factor(), s.get_growth_interval(),
            s.get_backoff_factor()) == (65536.0, 2.0, 2000, 0.5)


def test_runner_swaps_the_precision_for_the_plugin():
    base = {"trainer": {"accelerator": "cpu", "precision": "32-true", "max_epochs": 1}}
    kw = _trainer_kwargs(OmegaConf.create({**base, "clip_scaled_grads": True}))
    assert "precision" not in kw and isinstance(kw["plugins"][0], ScaledClipPrecision)
    assert kw["plugins"][0].device == "cpu"
    kw = _trainer_kwargs(OmegaConf.create(base))  # absent: off
    assert kw["precision"] == "32-true" and "plugins" not in kw
