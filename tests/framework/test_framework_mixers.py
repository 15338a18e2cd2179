"""Every registered mixer: (B, T, D) -> (B, T, D), causal, trains 2 steps with finite loss and a
gradient on every parameter; hand-written pieces checked against direct formulas."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from tasks.common.backbone import SequenceBackbone
from tasks.common.errors import ConfigError
from zeros.mixers import MixerSpec, available_mixers, create_mixer, encoder_mixers

ALL = available_mixers()
EXPECTED = {"zeros", "zeros_sm", "softmax", "linear_attn", "gla", "deltanet", "mamba", "mamba2",
            "hgrn", "hgrn2", "retnet", "rwkv6", "hyena", "mh_hyena", "aft", "h3", "baseconv"}


def test_registry_has_every_table_baseline():
    assert EXPECTED <= set(ALL)


def test_every_mixer_has_its_config_and_every_config_a_mixer():
    # adding a mixer = its class with @register + conf/mixer/<name>.yaml (what `mixer=<name>`
    # selects); the ablation variants (zeros_no_gates, ...) are configs of a registered mixer
    conf = Path(__file__).resolve().parents[2] / "conf" / "mixer"
    names = {p.stem: yaml.safe_load(p.read_text())["name"] for p in conf.glob("*.yaml")}
    missing = [m for m in ALL if names.get(m) != m]
    assert not missing, f"add conf/mixer/<name>.yaml (name, label, kwargs) for {missing}"
    unknown = {f"conf/mixer/{f}.yaml": n for f, n in names.items() if n not in ALL}
    assert not unknown, f"these configs name no registered mixer: {unknown}"


@pytest.mark.parametrize("name", ALL)
def test_two_training_steps_every_mixer(name):
    # imported here: torchmetrics/lightning import triton.language, which must not happen while
    # this module is collected (tests/kernels sets TRITON_INTERPRET in its conftest, later)
    from tasks.common.objective import TokenClassification
    from tasks.toy.data import make_recall
    torch.manual_seed(0)
    V, T = 16, 9
    model = SequenceBackbone(MixerSpec(name), d_model=32, n_layers=2, n_heads=4, vocab_size=V)
    obj = TokenClassification(V)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inp, tgt = make_recall(8, T, V, seed=0)
    losses = []
    for _ in range(2):
        opt.zero_grad()
        logits = model(inp)
        assert logits.shape == (8, T, V)
        loss = obj.step(model, {"input": inp, "target": tgt}, "train").loss
        assert torch.isfinite(loss)
        loss.backward()
        no_grad = [n for n, p in model.named_parameters()
                   if p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().sum() == 0]
        assert not no_grad, f"{name}: parameters without a gradient: {no_grad}"
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)


@pytest.mark.parametrize("name", ALL)
def test_mixer_shape_and_causality(name):
    torch.manual_seed(1)
    m = create_mixer(name, 32, 4, causal=True).eval()
    x = torch.randn(2, 12, 32)
    x2 = x.clone()
    x2[:, 7:] += torch.randn(2, 5, 32)  # change the future of position 6
    with torch.no_grad():
        y, y2 = m(x), m(x2)
    assert y.shape == x.shape
    assert torch.allclose(y[:, :7], y2[:, :7], atol=1e-5), f"{name} leaks the future"
    assert not torch.allclose(y[:, 7:], y2[:, 7:], atol=1e-5)


@pytest.mark.parametrize("name", encoder_mixers())
def test_encoder_mode_sees_the_future(name):
    torch.manual_seed(2)
    m = create_mixer(name, 32, 4, causal=False).eval()
    x = torch.randn(2, 10, 32)
    x2 = x.clone()
    x2[:, -1] += 1.0
    with torch.no_grad():
        assert (m(x)[:, 0] - m(x2)[:, 0]).abs().max() > 1e-6


def test_bad_names_and_heads_fail_with_the_fix():
    with pytest.raises(ValueError, match="unknown mixer 'nope': use one of .*zeros"):
        create_mixer("nope", 32, 4)
    with pytest.raises(ValueError, match="not divisible by n_heads=5"):
        create_mixer("softmax", 32, 5)
    with pytest.raises(ValueError, match="no encoder .* mode"):
        create_mixer("mamba", 32, 4, causal=False)
    with pytest.raises(ConfigError, match="not divisible"):
        SequenceBackbone(MixerSpec("gla"), d_model=30, n_layers=1, n_heads=4, vocab_size=8)


def _loop_gla(q, k, v, gk, scale):  # [B, T, H, K] reference recurrence
    B, T, H, K = q.shape
    S = torch.zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        S = S * gk[:, t].exp()[..., None] + k[:, t, ..., None] * v[:, t, :, None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, S))
    return torch.stack(out, 1)


def test_fla_cpu_ops_match_direct_recurrences():
    from zeros.mixers.fla_based import delta_op, gla_op, hgrn_op, simple_gla_op
    torch.manual_seed(3)
    B, T, H, K = 2, 7, 2, 4
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, K)
    gk = F.logsigmoid(torch.randn(B, T, H, K))
    for scale in (1.0, K ** -0.5):
        assert torch.allclose(gla_op(q, k, v, gk, scale), _loop_gla(q, k, v, gk, scale), atol=1e-5)
    g = F.logsigmoid(torch.randn(B, T, H))
    ref = _loop_gla(q, k, v, g[..., None].expand(B, T, H, K), 0.5)
    assert torch.allclose(simple_gla_op(q, k, v, g, 0.5), ref, atol=1e-5)
    # delta rule with beta = 0 keeps S = 0; with unit keys and beta = 1 it stores v exactly
    kn = F.normalize(k, dim=-1)
    assert delta_op(q, kn, v, torch.zeros(B, T, H), 1.0).abs().max() < 1e-6
    o = delta_op(kn, kn, v, torch.ones(B, T, H), 1.0)
    assert torch.allclose(o[:, 0], v[:, 0], atol=1e-5)
    x, gh = torch.randn(B, T, 5), F.logsigmoid(torch.randn(B, T, 5))
    h, ref = torch.zeros(B, 5), []
    for t in range(T):
        h = gh[:, t].exp() * h + x[:, t]
        ref.append(h)
    assert torch.allclose(hgrn_op(x, gh), torch.stack(ref, 1), atol=1e-5)


def test_selective_scan_matches_loop():
    from zeros.mixers.ssm import selective_scan
    torch.manual_seed(4)
    B, T, Di, N = 2, 37, 3, 4  # T not a multiple of the chunk
    u, Bm, Cm = torch.randn(B, T, Di), torch.randn(B, T, N), torch.randn(B, T, N)
    dA = -torch.rand(B, T, Di, N) * 3
    h, ref = torch.zeros(B, Di, N), []
    for t in range(T):
        h = dA[:, t].exp() * h + u[:, t, :, None] * Bm[:, t, None, :]
        ref.append((h * Cm[:, t, None, :]).sum(-1))
    assert torch.allclose(selective_scan(u, dA, Bm, Cm, chunk=16), torch.stack(ref, 1), atol=1e-4)


def test_fft_conv_and_aft_match_direct_sums():
    from zeros.mixers.common import fft_causal_conv
    torch.manual_seed(5)
    u, k = torch.randn(2, 3, 11), torch.randn(3, 11)
    ref = torch.stack([sum(k[:, s] * u[..., t - s] for s in range(t + 1)) for t in range(11)], -1)
    assert torch.allclose(fft_causal_conv(u, k), ref, atol=1e-4)
    m = create_mixer("aft", 8, 1, causal=True, max_len=16)
    with torch.no_grad():
        m.w.normal_()
    x = torch.randn(2, 6, 8)
    q, kk, v = m.qkv(x).chunk(3, dim=-1)
    out = []
    for t in range(6):
        w = torch.exp(kk[:, : t + 1] + m.w[t, : t + 1, None])  # [B, t+1, D]
        out.append(torch.sigmoid(q[:, t]) * (w * v[:, : t + 1]).sum(1) / w.sum(1))
    assert torch.allclose(m(x), m.out_proj(torch.stack(out, 1)), atol=1e-5)


def test_linear_attention_matches_explicit_weights():
    torch.manual_seed(6)
    m = create_mixer("linear_attn", 8, 2)
    x = torch.randn(1, 5, 8)
    q, k, v = (t.view(1, 5, 2, 4).transpose(1, 2) for t in m.qkv(x).chunk(3, dim=-1))
    q, k = F.elu(q) + 1, F.elu(k) + 1
    a = (q @ k.transpose(-1, -2)).tril()
    o = (a / a.sum(-1, keepdim=True)) @ v  # [1, H, T, d]
    ref = m.out(o.transpose(1, 2).reshape(1, 5, 8))
    assert torch.allclose(m(x), ref, atol=1e-5)
