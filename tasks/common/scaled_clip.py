"""The authors' time-series update rule as a Lightning precision plugin (`clip_scaled_grads: true`).

LJC-FVNR's `exp/exp_main.py` (ARMA-Attention @ f22adb9, lines 244, 286-346; SAMoVAR's copy the
same) trains under `torch.autocast('cuda', bfloat16)` with a `torch.cuda.amp.GradScaler()` and
runs, every step:

    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)   # still SCALED gradients
    scaler.step(optimizer)                                              # unscales, then steps
    scaler.update()

The clip sees the loss-scaled gradient (norm = scale x true norm, scale 2^16 at the start), so it
bites on practically every step: the gradient AdamW receives is the true one rescaled to a norm
of max_grad_norm / scale (when scale x norm > max_grad_norm), and that norm halves each time the
scaler doubles its scale (every 2000 steps without an inf). Lightning's own `MixedPrecision`
unscales BEFORE it clips (the documented AMP recipe) and refuses a scaler with bf16, so it cannot
run this rule. This plugin is Lightning's AMP step without the unscale before the clip: the clip
is the trainer's own (`trainer.gradient_clip_val`, applied by Lightning inside `_after_closure`),
so it acts on the scaled gradients exactly as the authors' line does; `scaler.step` unscales
(and skips a step with an inf/nan, halving the scale) and `scaler.update` grows it.

The scaler is torch's default GradScaler, as the authors construct it: init_scale 2^16,
growth_factor 2 every growth_interval 2000 finite steps, backoff_factor 0.5 on an inf/nan.
Autocast is bf16 on CPU as on GPU (on this machine's CPU it costs what fp32 does: measured,
docs/timeseries.md).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable

import torch
from lightning.pytorch.plugins.precision import Precision


class ScaledClipPrecision(Precision):
    """bf16 autocast + GradScaler; the trainer's gradient clip sees the SCALED gradients."""

    precision = "bf16-mixed"  # what trainer.precision (and the run JSON) reports

    def __init__(self, device: str):
        self.device = device
        self.scaler = torch.amp.GradScaler(device)  # torch's defaults = the authors' GradScaler()

    @contextmanager
    def forward_context(self):
        with torch.autocast(self.device, dtype=torch.bfloat16, cache_enabled=False):
            yield

    def pre_backward(self, tensor, module):
        return super().pre_backward(self.scaler.scale(tensor), module)

    def optimizer_step(self, optimizer, model, closure: Callable[[], Any], **kwargs: Any) -> Any:
        closure_result = closure()  # forward + backward of the scaled loss
        if closure_result is None and model.automatic_optimization:
            return None  # training_step returned None: nothing to step (as Lightning's AMP)
        # hooks + the trainer's clip, on SCALED gradients: Precision's private helper, no public
        # equivalent (checked: lightning 2.6.6; guarded by test_framework_private_apis.py)
        self._after_closure(model, optimizer)
        out = self.scaler.step(optimizer, **kwargs)  # unscale; skip the step on inf/nan
        self.scaler.update()
        return out

    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict()  # the scale and its growth tracker resume with the run

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scaler.load_state_dict(state_dict)
