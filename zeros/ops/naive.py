"""Ground truth: ZeroS with the explicit (B, H, T, T) weight matrix (docs/spec.md §2-§4).

O(T^2) memory. Every fast path is tested against these functions, and these functions are
tested against a scalar float64 transcription of docs/spec.md in tests/test_naive.py.
Inputs are already validated and cast to the compute dtype by `zeros.ops.api`.
Shapes: q, k, v [B, T, H, d]; s, g1, gh, g0 [B, T, H].
"""
from __future__ import annotations

import torch


def _mask(T: int, causal: bool, device) -> torch.Tensor:
    """Which (t, i) pairs are summed. [T, T] bool"""
    if causal:
        return torch.ones(T, T, dtype=torch.bool, device=device).tril()
    return torch.ones(T, T, dtype=torch.bool, device=device)


def zeros_weights(logits, g1, gh, g0=None, causal=True, mask=None):
    """The reweighted zero-sum softmax weights r_{t,i} (docs/spec.md §2).

    logits: [B, H, Tq, Tk] (s_i broadcast along rows for ZeroS, s_{t,i} for ZeroS-SM);
    g1, gh, g0: [B, H, Tq]. `mask` [Tq, Tk] (bool, True = summed) overrides `causal`, e.g. for
    decoding rows that see a cache. Returns r: [B, H, Tq, Tk], zero where masked out.
    """
    if mask is None:
        mask = _mask(logits.shape[-1], causal, logits.device)  # [T, T]
    n = mask.sum(-1, keepdim=True).to(logits.dtype)  # [Tq, 1] positions each row sums over
    masked = logits.masked_fill(~mask, float("-inf"))
    p = torch.softmax(masked, dim=-1)  # [B, H, T, T] full softmax over the visible prefix
    zero = torch.zeros((), dtype=logits.dtype, device=logits.device)
    s_bar = torch.where(mask, logits, zero).sum(-1, keepdim=True) / n  # [B, H, T, 1]
    delta = torch.where(mask, logits - s_bar, zero)  # δ_{t,i}
    eps = torch.where(mask, p - 1.0 / n - delta / n, zero)  # ε_{t,i}, rows sum to 0
    r = g1[..., None] * delta / n + gh[..., None] * eps
    if g0 is not None:
        r = r + torch.where(mask, g0[..., None] / n, zero)
    return r


def naive_zeros(q, k, v, s, g1, gh, g0=None, causal=True):
    """o_t = Σ_i r_{t,i} (q_t·k_i) v_i with explicit weights. Returns [B, T, H, d]."""
    B, T, H, d = q.shape
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, T, d]
    logits = s.transpose(1, 2)[:, :, None, :].expand(B, H, T, T)  # s_i on every row t
    r = zeros_weights(logits, g1.transpose(1, 2), gh.transpose(1, 2),
                      None if g0 is None else g0.transpose(1, 2), causal)
    cos = qh @ kh.transpose(-1, -2)  # [B, H, T, T] q_t·k_i
    o = (r * cos) @ vh  # [B, H, T, d]
    return o.transpose(1, 2)


def naive_zeros_sm(q, k, v, g1, gh, g0=None, causal=True, scale=None):
    """ZeroS-SM (docs/spec.md §4): the same reweighting on logits scale·q_t·k_i, no cos factor."""
    d = q.shape[-1]
    scale = d ** -0.5 if scale is None else scale
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, T, d]
    logits = scale * (qh @ kh.transpose(-1, -2))  # [B, H, T, T]
    w = zeros_weights(logits, g1.transpose(1, 2), gh.transpose(1, 2),
                      None if g0 is None else g0.transpose(1, 2), causal)
    return (w @ vh).transpose(1, 2)  # [B, T, H, d]
