"""Perplexity on non-overlapping blocks (fairseq eval_lm with --context-window 0).

Every token of the split is a target exactly once; its context is the tokens before it in its
block (plus one previous token as the first input). ppl = exp(Σ NLL / N) over all N tokens.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .data import block_pair, block_ranges


@torch.no_grad()
def evaluate_blocks(model, tokens: np.ndarray, *, block: int = 512, batch_size: int = 8,
                    eos_id: int, max_blocks: int | None = None, device="cpu",
                    autocast_dtype=None) -> dict:
    """-> {loss (mean token NLL, nats), ppl, tokens, blocks}. max_blocks: cheap validation
    during training (the first blocks); None = the whole split."""
    was_training = model.training
    model.eval()
    ranges = block_ranges(len(tokens), block)
    if max_blocks is not None:
        ranges = ranges[:max_blocks]
    nll_sum, n_tok = 0.0, 0
    # full blocks batch together; a short last block runs alone
    groups: list[list[tuple[int, int]]] = []
    for r in ranges:
        if groups and len(groups[-1]) < batch_size and \
                groups[-1][0][1] - groups[-1][0][0] == r[1] - r[0]:
            groups[-1].append(r)
        else:
            groups.append([r])
    for group in groups:
        pairs = [block_pair(tokens, s, e, eos_id) for s, e in group]
        x = torch.stack([p[0] for p in pairs]).to(device)  # [B, L]
        y = torch.stack([p[1] for p in pairs]).to(device)  # [B, L]
        with torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype,
                            enabled=autocast_dtype is not None):
            logits = model(x)  # [B, L, V]
        nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none")
        nll_sum += float(nll.double().sum())  # float64 sum: millions of tokens, no drift
        n_tok += y.numel()
    model.train(was_training)
    loss = nll_sum / max(n_tok, 1)
    return {"loss": loss, "ppl": math.exp(min(loss, 700.0)), "tokens": n_tok,
            "blocks": len(ranges)}
