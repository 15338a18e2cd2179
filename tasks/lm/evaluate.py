"""Perplexity over evaluation windows: fairseq eval_lm with --context-window C (C = 0: the
non-overlapping blocks of the protocol's reading; data.eval_windows).

Every token of the split is a target exactly once; its context is the tokens before it in its
window (up to C earlier tokens plus those of its block; one previous token as the first input).
ppl = exp(Σ NLL / N) over all N tokens.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .data import block_pair, eval_windows


@torch.no_grad()
def evaluate_blocks(model, tokens: np.ndarray, *, block: int = 512, batch_size: int = 8,
                    eos_id: int, max_blocks: int | None = None, device="cpu",
                    autocast_dtype=None, context: int = 0) -> dict:
    """-> {loss (mean token NLL, nats), ppl, tokens, blocks}. max_blocks: cheap validation
    during training (the first windows); None = the whole split."""
    was_training = model.training
    model.eval()
    windows = eval_windows(len(tokens), block, context)
    if max_blocks is not None:
        windows = windows[:max_blocks]
    nll_sum, n_tok = 0.0, 0
    # windows of one length batch together; a short one runs alone
    groups: list[list[tuple[int, int, int]]] = []
    for r in windows:
        if groups and len(groups[-1]) < batch_size and \
                groups[-1][0][2] - groups[-1][0][0] == r[2] - r[0]:
            groups[-1].append(r)
        else:
            groups.append([r])
    for group in groups:
        pairs = [block_pair(tokens, w, e, eos_id) for w, _, e in group]
        x = torch.stack([p[0] for p in pairs]).to(device)  # [B, L]
        y = torch.stack([p[1] for p in pairs]).to(device)  # [B, L]
        scored = torch.stack([torch.arange(e - w) >= s - w for w, s, e in group]).to(device)
        with torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype,
                            enabled=autocast_dtype is not None):
            logits = model(x)  # [B, L, V]
        nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
        nll_sum += float(nll[scored.flatten()].double().sum())  # float64: no drift over millions
        n_tok += int(scored.sum())
    model.train(was_training)
    loss = nll_sum / max(n_tok, 1)
    return {"loss": loss, "ppl": math.exp(min(loss, 700.0)), "tokens": n_tok,
            "blocks": len(windows)}
