"""Long-convolution and AFT baselines, written here (no maintained package provides them as
standalone layers): Hyena, multi-head Hyena, H3, BaseConv, AFT-full. All causal except AFT,
which also has an encoder mode."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from .common import ShortConv, fft_causal_conv
from .registry import register


class Sin(nn.Module):
    def __init__(self, dim: int, w: float = 1.0):
        super().__init__()
        self.freq = nn.Parameter(w * torch.ones(1, dim))

    def forward(self, x):
        return torch.sin(self.freq * x)


class ImplicitFilter(nn.Module):
    """Hyena's implicit long filter: h(t) = FFN(posemb(t)) · exp(-|decay|·t), n_filters channels
    [n_filters, T] for any T (no maximum length stored)."""

    def __init__(self, n_filters: int, emb_dim: int = 3, order: int = 16, w: float = 1.0,
                 fast_decay_pct: float = 0.3, slow_decay_pct: float = 1.5, target: float = 1e-2):
        super().__init__()
        if emb_dim % 2 == 0 or emb_dim < 3:
            raise ValueError(f"implicit filter emb_dim must be odd and >= 3, got {emb_dim}: "
                             "change mixer.kwargs.filter_emb_dim")
        self.emb_dim, self.n_bands = emb_dim, (emb_dim - 1) // 2
        self.ffn = nn.Sequential(nn.Linear(emb_dim, order), Sin(order, w), nn.Linear(order, order),
                                 Sin(order, w), nn.Linear(order, n_filters, bias=False))
        # decay rates chosen so the window reaches `target` at fast/slow fractions of the length
        max_decay, min_decay = math.log(target) / fast_decay_pct, math.log(target) / slow_decay_pct
        self.register_buffer("deltas", torch.linspace(min_decay, max_decay, n_filters).abs())

    def forward(self, T: int, device) -> torch.Tensor:
        t = torch.linspace(0, 1, T, device=device)[:, None]  # [T, 1]
        bands = torch.linspace(1e-4, self.n_bands - 1, self.n_bands, device=device)[None]
        ang = 2 * math.pi * bands * torch.arange(T, device=device)[:, None] / T  # [T, bands]
        z = torch.cat([t, torch.cos(ang), -torch.sin(ang)], dim=-1)  # [T, emb_dim]
        h = self.ffn(z)  # [T, n_filters]
        h = h * torch.exp(-t * self.deltas)  # exponential modulation window
        return h.transpose(0, 1)  # [n_filters, T]


@register("hyena")
class Hyena(nn.Module):
    """Hyena operator (Poli et al. 2023), order 2: x0, x1, v = shortconv(in_proj(u));
    v = long_conv(v ⊙ x1) + b ⊙ (v ⊙ x1); y = out_proj(v ⊙ x0). n_heads is unused."""

    def __init__(self, d_model, n_heads, *, causal=True, order=2, filter_order=64,
                 filter_emb_dim=5, short_conv=3, dropout=0.0):
        super().__init__()
        self.d_model, self.order = d_model, order
        self.in_proj = nn.Linear(d_model, (order + 1) * d_model)
        self.short = ShortConv((order + 1) * d_model, short_conv, activation=False)
        self.filters = ImplicitFilter((order - 1) * d_model, filter_emb_dim, filter_order)
        self.bias = nn.Parameter(torch.randn(order - 1, d_model))
        self.out_proj = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, D = x.shape
        *xs, v = self.short(self.in_proj(x)).split(D, dim=-1)  # order x [B, T, D], v
        k = self.filters(T, x.device).view(self.order - 1, D, T)  # [order-1, D, T]
        v = v.transpose(1, 2)  # [B, D, T]
        for o, xi in enumerate(reversed(xs[1:])):
            v = self.drop(v * xi.transpose(1, 2))
            v = fft_causal_conv(v, k[o]) + self.bias[o][:, None] * v
        return self.out_proj((v * xs[0].transpose(1, 2)).transpose(1, 2))


@register("mh_hyena")
class MultiHeadHyena(nn.Module):
    """Multi-head Hyena (MAD; the multi-head form of H3): per head the outer product k_sᵀ v_s is
    long-convolved over time with one implicit filter per head and read out by q_t:
    y_t = q_t Σ_{s≤t} h(t-s) k_sᵀ v_s. Short convs on q, k, v."""

    def __init__(self, d_model, n_heads, *, causal=True, filter_order=64, filter_emb_dim=5,
                 short_conv=3, dropout=0.0):
        super().__init__()
        self.drop = nn.Dropout(dropout)  # on the output, as the attention mixers do
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.short = ShortConv(3 * d_model, short_conv, activation=False)
        self.filters = ImplicitFilter(n_heads, filter_emb_dim, filter_order)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, D = x.shape
        H, d = self.n_heads, self.head_dim
        q, k, v = (t.view(B, T, H, d) for t in self.short(self.in_proj(x)).split(D, dim=-1))
        kv = torch.einsum("bthi,bthj->bhijt", k, v).reshape(B, H * d * d, T)  # [B, H·d·d, T]
        filt = self.filters(T, x.device).repeat_interleave(d * d, dim=0)  # [H·d·d, T]
        s = fft_causal_conv(kv, filt).view(B, H, d, d, T)
        y = torch.einsum("bthi,bhijt->bthj", q, s)  # [B, T, H, d]
        return self.drop(self.out_proj(y.reshape(B, T, D)))


def s4d_kernel(log_dt, A_re, A_im, C, T: int) -> torch.Tensor:
    """Diagonal SSM (S4D-Lin, ZOH) impulse response [C_ch, T]: K_t = 2 Re Σ_n C_n B̄_n Ā_n^t."""
    dt = log_dt.exp()[:, None]  # [C_ch, 1]
    A = torch.complex(-A_re.exp(), A_im)  # [C_ch, N]
    dtA = A * dt
    Cc = torch.view_as_complex(C) * (dtA.exp() - 1) / A  # ZOH-discretised B·C, B = 1
    t = torch.arange(T, device=A_re.device)
    return 2 * torch.einsum("cn,cnt->ct", Cc, torch.exp(dtA[..., None] * t)).real


@register("h3")
class H3(nn.Module):
    """H3 (Fu et al. 2023), head dim 1 (its default): y = out(q ⊙ SSM_diag(shift(k) ⊙ v)), the
    shift SSM as a causal short conv on k and the diagonal SSM as an S4D kernel per channel."""

    def __init__(self, d_model, n_heads, *, causal=True, d_state=32, shift_size=4,
                 dt_min=1e-3, dt_max=1e-1, dropout=0.0):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.shift = ShortConv(d_model, shift_size, activation=False)
        n = d_state // 2
        self.log_dt = nn.Parameter(torch.rand(d_model) * (math.log(dt_max) - math.log(dt_min))
                                   + math.log(dt_min))
        self.A_re = nn.Parameter(torch.log(0.5 * torch.ones(d_model, n)))
        self.A_im = nn.Parameter(math.pi * torch.arange(n).float().repeat(d_model, 1))
        self.C = nn.Parameter(torch.randn(d_model, n, 2) * 0.5 ** 0.5)
        self.D = nn.Parameter(torch.randn(d_model))
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # [B, T, D]
        kv = (self.shift(k) * v).transpose(1, 2)  # [B, D, T]
        K = s4d_kernel(self.log_dt, self.A_re, self.A_im, self.C, T)  # [D, T]
        s = fft_causal_conv(kv, K) + self.D[:, None] * kv
        return self.drop(self.out_proj(q * s.transpose(1, 2)))


@register("baseconv")
class BaseConv(nn.Module):
    """BaseConv (Arora et al. 2023, Zoology): y = (W u + b) ⊙ longconv(u), long conv with an
    implicit filter per channel. n_heads is unused."""

    def __init__(self, d_model, n_heads, *, causal=True, filter_order=64, filter_emb_dim=5,
                 dropout=0.0):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.proj = nn.Linear(d_model, d_model)
        self.filters = ImplicitFilter(d_model, filter_emb_dim, filter_order)
        self.bias = nn.Parameter(torch.randn(d_model))

    def forward(self, x):
        T = x.shape[1]
        u = x.transpose(1, 2)  # [B, D, T]
        conv = fft_causal_conv(u, self.filters(T, x.device)) + self.bias[:, None] * u
        return self.drop(self.proj(x) * conv.transpose(1, 2))


@register("aft", encoder=True)
class AFT(nn.Module):
    """AFT-full (Zhai et al. 2021): y_t = σ(q_t) ⊙ Σ_i e^{k_i + w_{t,i}} ⊙ v_i / Σ_i e^{k_i + w_{t,i}},
    i ≤ t when causal; w is a learned [max_len, max_len] pairwise bias. n_heads is unused."""

    def __init__(self, d_model, n_heads, *, causal=True, max_len=1024, dropout=0.0):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.causal, self.max_len = causal, max_len
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.w = nn.Parameter(torch.zeros(max_len, max_len))
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, D = x.shape
        if T > self.max_len:
            raise ValueError(f"AFT sequence length {T} > max_len={self.max_len}: raise "
                             "mixer.kwargs.max_len")
        q, k, v = self.qkv(x).float().chunk(3, dim=-1)  # [B, T, D]
        w = self.w[:T, :T].float()
        if self.causal:
            w = w.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=x.device).tril(), -float("inf"))
        ew = torch.exp(w - w.max(dim=1, keepdim=True).values)  # [T, T] row-stabilised
        ek = torch.exp(k - k.max(dim=1, keepdim=True).values)  # [B, T, D] time-stabilised
        num = torch.einsum("ti,bid->btd", ew, ek * v)
        den = torch.einsum("ti,bid->btd", ew, ek)
        return self.drop(self.out_proj((torch.sigmoid(q) * num / den).to(x.dtype)))
