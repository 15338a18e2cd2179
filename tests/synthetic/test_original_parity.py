"""Table 1 (MAD), the ablation and Figure 3 (MQAR) against the original code, one choice per test:
a fixed-seed model or schedule of ours vs a short re-statement of what the original runs.
mad-lab: athms/mad-lab main @ 0f49a45 (2024-12-17); zoology: HazyResearch/zoology @ 8700f46
(2025-03-04). File:line of each choice: docs/protocols.md."""
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[2] / "conf"


def _compose(experiment, *extra, profile="cpu"):
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("train", [f"experiment={experiment}", f"profile={profile}", *extra])


def _model(cfg):
    from tasks.common.runner import build
    torch.manual_seed(0)
    return build(cfg, check_data=False)[1]


def _mad(mixer, task="in-context-recall", profile="cpu"):
    return _compose("table1/mad", f"mixer={mixer}", f"mad_task={task}", profile=profile)


# --- mad-lab's attention row: flash_attn MHA, rotary_emb_dim 8 (mh-attention.yml) ----------------

def _flash_rotary(x, rotary_dim, base=10000.0):
    """flash_attn's RotaryEmbedding + apply_rotary_emb_torch, interleaved=False (mad-lab's default):
    the first rotary_dim channels of x [B, T, H, d] turn, channel j with j + rotary_dim/2."""
    T = x.shape[1]
    inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)  # [T, r/2]
    cos = torch.cat([freqs.cos()] * 2, -1)[:, None]  # "... d -> ... 1 (2 d)"
    sin = torch.cat([freqs.sin()] * 2, -1)[:, None]
    xr = x[..., :rotary_dim]
    x1, x2 = xr.chunk(2, dim=-1)
    return torch.cat([xr * cos + torch.cat([-x2, x1], -1) * sin, x[..., rotary_dim:]], -1)


def _madlab_mha(layer, x, n_heads=16, rotary_dim=8):
    """flash_attn MHA as mad-lab builds it: Wqkv (bias) -> '(three h d)' -> rotary on q, k ->
    causal softmax at scale 1/sqrt(d) -> out_proj (bias)."""
    B, T, D = x.shape
    q, k, v = layer.qkv(x).view(B, T, 3, n_heads, D // n_heads).unbind(2)
    q, k = _flash_rotary(q, rotary_dim), _flash_rotary(k, rotary_dim)
    s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D // n_heads)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.einsum("bhts,bshd->bthd", s.softmax(-1), v)
    return layer.out(o.reshape(B, T, D))


def test_mad_transformer_row_turns_q_and_k_as_madlabs_rotary_over_the_whole_head():
    cfg = _mad("softmax")
    assert cfg.backbone.n_heads == 16 and cfg.backbone.d_model // cfg.backbone.n_heads == 8
    model = _model(cfg).eval()
    layer = model.blocks[0].layer
    x = torch.randn(2, 40, 128)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), _madlab_mha(layer, x), rtol=1e-4, atol=1e-5)


# --- mad-lab's effective schedule: the cosine under key 'scheduler' is never stepped ----------

def _madlab_lr_trajectory(lr, epochs, steps):
    """mad-lab's configure_optimizers (pl_model_wrapper.py:95-122) returns {'optimizer', 'scheduler'};
    Lightning's own parser keeps only 'lr_scheduler', so no scheduler steps: lr per optimizer step."""
    from lightning.pytorch.core.optimizer import _configure_optimizers
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs, eta_min=1e-6)
    with pytest.warns(Warning, match="unsupported keys.*scheduler"):  # Lightning drops the key
        optimizers, schedulers, _ = _configure_optimizers({"optimizer": opt, "scheduler": sched})
    assert schedulers == []
    out = []
    for _ in range(steps):
        out.append(optimizers[0].param_groups[0]["lr"])
        p.grad = torch.ones(1)
        optimizers[0].step()
    return out


@pytest.mark.parametrize("profile", ["smoke", "cpu", "paper"])
def test_mad_lr_trajectory_is_madlabs_constant_lr_at_every_profile(profile):
    from tasks.common.module import make_lr_lambda
    cfg = _mad("zeros", profile=profile)
    lr, steps = float(cfg.optimizer.lr), 300
    fn = make_lr_lambda(OmegaConf.to_container(cfg.scheduler, resolve=True), steps, lr)
    ours = [lr * fn(s) for s in range(steps)]
    assert ours == pytest.approx(_madlab_lr_trajectory(lr, int(cfg.trainer.max_epochs), steps))


def test_madlabs_intended_cosine_is_the_named_option():
    from tasks.common.module import make_lr_lambda
    cfg = _compose("table1/mad", "scheduler=cosine")
    fn = make_lr_lambda(OmegaConf.to_container(cfg.scheduler, resolve=True), 100, 1e-3)
    assert fn(0) == 1.0 and 1e-3 * fn(100) == pytest.approx(1e-6)  # mad-lab's min_lr


# --- mad-lab's linear attention (attention_linear.py, feature_map.py HadamardFeatureMap) -------

def _madlab_linear_attention(layer, x, n_heads=16, eps=1e-12):
    """mad-lab LinearAttention, quadratic path: bias-free q/k/v projections, per-head learned
    Hadamard map phi(x) = layer1(x) * layer2(x) (own map for q and for k), tril(phi_q phi_k^T) v
    divided by phi_q . cumsum(phi_k) + eps, out_proj without bias."""
    B, T, D = x.shape
    d = D // n_heads
    wq, wk, wv = layer.qkv.weight.split(D)  # our fused projection = mad-lab's proj_q, proj_k, proj_v
    q, k, v = ((x @ w.T).view(B, T, n_heads, d).transpose(1, 2) for w in (wq, wk, wv))
    q = layer.phi_q.layer1(q) * layer.phi_q.layer2(q)
    k = layer.phi_k.layer1(k) * layer.phi_k.layer2(k)
    a = torch.tril(torch.einsum("bhnd,bhmd->bhnm", q, k))
    y = torch.einsum("bhnm,bhme->bhne", a, v)
    y = y / (torch.einsum("bhld,bhld->bhl", q, k.cumsum(2)) + eps)[..., None]
    return y.transpose(1, 2).reshape(B, T, D) @ layer.out.weight.T


def test_mad_linattn_row_is_madlabs_hadamard_linear_attention():
    model = _model(_mad("linear_attn")).eval()
    layer = model.blocks[0].layer
    assert layer.qkv.bias is None and layer.out.bias is None and layer.eps == 1e-12
    for phi in (layer.phi_q, layer.phi_k):  # mad-lab's LanguageModel init zeroes these biases
        assert phi.layer1.weight.shape == (8, 8) and not phi.layer1.bias.any()
        with torch.no_grad():
            phi.layer1.bias.normal_(), phi.layer2.bias.normal_()  # exercise them in the parity
    x = torch.randn(2, 33, 128)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), _madlab_linear_attention(layer, x), rtol=1e-4,
                                   atol=1e-4)


# --- weight decay: mad-lab main decays every parameter ------------------------------------------

def test_mad_weight_decay_covers_every_parameter_as_madlab_main():
    # main @ 0f49a45: AdamW(self.parameters(), weight_decay=wd) (pl_model_wrapper.py:97-102); the
    # bias/norm exclusion is unmerged PR #6 (1f77b94). Already so before this change.
    from tasks.common.module import weight_decay_groups
    from tasks.common.runner import build
    cfg = _compose("table1/mad", "mixer=linear_attn", "optimizer.weight_decay=0.1")
    _, model, module = build(cfg, check_data=False)
    opt = module.optimizer_factory(weight_decay_groups(model, module.decay))
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] == 0.1 for p in g["params"]}
    assert decayed == {id(p) for p in model.parameters()}


# --- Mamba's dt bias survives the model init (mad-lab language_model.py:76, zoology's branch) ---

def _dt_in_mamba_range(bias):
    dt = F.softplus(bias.detach())
    return bias.abs().min() > 0 and dt.min() >= 1e-4 and dt.max() <= 0.1 + 1e-6


def test_mad_mamba_keeps_its_dt_bias():
    model = _model(_mad("mamba", task="memorization", profile="smoke"))
    biases = [m.dt_proj.bias for m in model.modules() if hasattr(m, "dt_proj")]
    assert len(biases) == 2 and all(_dt_in_mamba_range(b) for b in biases)


# --- MQAR: zoology's init, precision, batches -----------------------------------------------------

def _mqar(mixer, profile="cpu", d=128):
    return _compose("fig3/mqar", f"mixer={mixer}", f"backbone.d_model={d}",
                    "trainer.accelerator=cpu", profile=profile)


@pytest.mark.parametrize("mixer", ["softmax", "linear_attn", "zeros"])
def test_mqar_output_projection_has_zoologys_rescaled_init(mixer):
    # zoology model.py _init_weights: N(0, 0.02) everywhere, then every out_proj.weight
    # N(0, 0.02 / sqrt(2 n_layers)) (rescale_prenorm_residual)
    cfg = _mqar(mixer)
    model = _model(cfg)
    n_layers = int(cfg.backbone.n_layers)
    for m in model.mixers:
        want = 0.02 / math.sqrt(2 * n_layers)
        assert float(m.out.weight.detach().std()) == pytest.approx(want, rel=0.03)
        other = m.qkv.weight if hasattr(m, "qkv") else m.proj.weight  # the input projection
        assert float(other.detach().std()) == pytest.approx(0.02, rel=0.03)


def test_mqar_mamba_row_takes_zoologys_mamba_init_and_keeps_dt_bias():
    # zoology's Mamba branch: default Linear weights, biases zeroed unless _no_reinit (dt),
    # out_proj kaiming_uniform(a=sqrt 5) / sqrt(n_layers)
    model = _model(_mqar("mamba", profile="paper", d=64))
    for m in model.mixers:
        assert _dt_in_mamba_range(m.dt_proj.bias)
        fan_in = m.out_proj.weight.shape[1]
        want = 1 / math.sqrt(3 * fan_in) / math.sqrt(2)  # std of U(±1/sqrt(fan_in)) / sqrt(2)
        assert float(m.out_proj.weight.detach().std()) == pytest.approx(want, rel=0.05)


@pytest.mark.parametrize("profile", ["smoke", "cpu", "paper"])
def test_mqar_trains_in_fp32_at_every_profile_as_zoology(profile):
    assert _mqar("zeros", profile=profile).trainer.precision == "32-true"


def test_mqar_iterates_the_same_batches_in_order_every_epoch():
    from tasks.common.runner import build
    cfg = _compose("fig3/mqar", "task.datamodule.num_train=40", "task.datamodule.num_test=8",
                   "task.datamodule.batch_size=16", profile="smoke")
    dm = build(cfg, check_data=False)[0]
    dm.setup("fit")
    epochs = [[b["input"] for b in dm.train_dataloader()] for _ in range(2)]
    stored = torch.as_tensor(dm.sets["train"].x).long()  # the cached split, in its stored order
    for e in epochs:
        torch.testing.assert_close(torch.cat(e), stored)


def test_hadamard_linear_attention_is_causal_and_a_bad_feature_map_names_the_choices():
    from zeros.mixers import create_mixer
    torch.manual_seed(0)
    m = create_mixer("linear_attn", 32, 4, feature_map="hadamard", bias=False, eps=1e-12)
    x = torch.randn(1, 12, 32)
    y, x2 = m(x), x.clone()
    x2[:, 7:] += 1.0  # the future changes, the past outputs do not
    torch.testing.assert_close(m(x2)[:, :7], y[:, :7])
    with pytest.raises(ValueError, match="elu, hadamard"):
        create_mixer("linear_attn", 32, 4, feature_map="relu")
