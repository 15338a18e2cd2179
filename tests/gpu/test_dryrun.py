"""The dry-run's machinery and a fast slice of it (the whole grid: `make dry-run`)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import dryrun
import fake_cuda as fc
import paper_models as pm
from zeros.mixers import available_mixers, create_mixer


class _Twice(torch.autograd.Function):
    """A custom Function whose backward returns fp32 for a bf16 input (the engine casts)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return (g * 2).float()


def _toy_loss(lin, x):
    h = lin(x).to(torch.bfloat16)
    a, b = h.chunk(2, dim=-1)  # b unused: a None gradient to materialise
    return (_Twice.apply(a).float().square().sum() + lin.bias.sum())


def test_fake_backward_matches_autograd():
    torch.manual_seed(0)
    lin = nn.Linear(6, 4)
    x = torch.randn(3, 5, 6)
    _toy_loss(lin, x).backward()
    want = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad(set_to_none=True)
    fc.fake_backward(_toy_loss(lin, x))
    for g, w in zip((p.grad for p in lin.parameters()), want):
        assert g.dtype == w.dtype and torch.allclose(g, w)


def test_kernel_entry_rejects_mixed_dtypes():
    from kernels.zeros_triton import TRITON_OP
    with fc.fake_cuda(fc.Recorder()):
        q = torch.randn(2, 8, 2, 16, device="cuda")
        v = q.to(torch.bfloat16)
        s = torch.randn(2, 8, 2, device="cuda")
        with pytest.raises(fc.KernelEntryError, match="one dtype"):
            TRITON_OP(q, q, v, s, s, s, None, True, 64, True)


@pytest.mark.parametrize("precision", dryrun.PRECISIONS)
@pytest.mark.parametrize("name", available_mixers())
def test_every_mixer_runs_on_fake_cuda(name, precision):
    """Every mixer, fwd+bwd on fake CUDA, at MAD's head dim (d = 8; GLA key dim 4) and d = 32:
    consistent kernel dtypes, a path below the kernels' minimum dims, fp32 DeltaNet."""
    rec = fc.Recorder()
    for heads in (16, 4):
        m = create_mixer(name, 128, heads, dropout=0.1)
        with fc.fake_cuda(rec):
            fc.to_fake_cuda(m)
            x = torch.randn(2, 70, 128, device="cuda", requires_grad=True)
            amp = fc.cuda_autocast() if precision == "bf16-mixed" else dryrun._null()
            with amp:
                y = m(x)
            fc.fake_backward(y.float().square().mean())
            assert y.shape == x.shape and x.grad is not None
    if name == "zeros":  # the Triton kernels ran, in bf16 under autocast, d = 8 padded to 16
        assert rec.entries and {e["dtypes"][0] for e in rec.entries} == {
            "torch.bfloat16" if precision == "bf16-mixed" else "torch.float32"}
        assert any(r["consts"].get("D") == 16 for r in rec.launches)


def test_mixer_group_merge_equals_hydra_composition():
    exp = next(e for e in pm.experiment_names() if "toy" in e)
    base = pm._compose(exp)
    for mixer in ("softmax", "gla"):
        ours = pm._with_mixer(base, exp, mixer).mixer
        theirs = pm._compose(exp, [f"mixer={mixer}"]).mixer
        assert ours == theirs


def test_dryrun_toy_experiment_passes():
    results, launches = dryrun.run(only="toy", log=lambda *a: None)
    assert results and all(r["status"] == "ok" for r in results), results
    assert {r["precision"] for r in results} == set(dryrun.PRECISIONS)
    assert any(r["kernel"].startswith("kernels.") for r in launches)


def test_paper_configs_skips_experiments_without_paper_rows():
    """table1/mad_seeds trains cpu seeds only (`mixers.paper: null`): the dry-run has nothing to
    build there, and reading its sweep (`${mixers.${profile.name}}` -> None) must not crash it
    (CI's `make dry-run` did, 2026-12-05)."""
    assert list(pm.paper_configs("table1/mad_seeds")) == []
    assert next(pm.paper_configs("table1/mad"), None) is not None


def test_zeros_head_dim_above_128_takes_the_torch_path_under_autocast():
    """MQAR d_model 512, one head: auto picks the torch chunk path on CUDA, which must run with
    autocast off (its fp32 matmuls would otherwise get bf16 operands)."""
    rec = fc.Recorder()
    m = create_mixer("zeros", 512, 1)
    with fc.fake_cuda(rec):
        fc.to_fake_cuda(m)
        x = torch.randn(2, 64, 512, device="cuda")
        with fc.cuda_autocast():
            y = m(x)
        fc.fake_backward(y.float().sum())
    assert y.dtype == torch.bfloat16 and not rec.entries


@pytest.mark.parametrize("precision", dryrun.PRECISIONS)
def test_compiled_step_runs_under_every_precision(precision):
    """dryrun.step(compile=True) enters the autocast context twice (inference graph, then the
    training step): a reused @contextmanager object failed every bf16-mixed run."""
    from types import SimpleNamespace
    torch.manual_seed(0)
    m = create_mixer("zeros", 32, 2)
    objective = SimpleNamespace(step=lambda model, batch, stage: SimpleNamespace(
        loss=model(batch).float().square().mean()))
    with fc.fake_cuda(fc.Recorder()):
        fc.to_fake_cuda(m)
        dryrun.step(m, SimpleNamespace(objective=objective), torch.randn(2, 20, 32, device="cuda"),
                    precision, compile=True)


def test_compiled_table4_gla_step_runs():
    """Table 4's GLA decoder under torch.compile (dynamo + aot_eager on fake CUDA): dynamo cannot
    trace fla's GLA autograd Functions ("an intermediate tensor ... aliases an input"), so the
    kernel call runs eagerly at a graph break (zeros/mixers/fla_based.py) instead of failing."""
    case, cfg = next((c, cfg) for c, cfg in pm.paper_configs("table4/decoder")
                     if "mixer=gla" in c.overrides)
    dm, model, module = pm.build_case(cfg)
    with fc.fake_cuda(fc.Recorder()):
        batch = pm.synthetic_batch(cfg, dm)
        fc.to_fake_cuda(model)
        dryrun.step(model, module, batch, "32-true", compile=True)


@pytest.mark.parametrize("exp", ["toy/recall", "fig2/regbench", "table4/decoder"])
def test_meta_key_equals_the_key_of_the_real_build(exp):
    """The dry-run skips a case whose meta-device key was already run: the key must be the one
    the real build gives, or coverage would shrink (or nothing would be skipped)."""
    case, cfg = next(iter(pm.paper_configs(exp)))
    dm, model, _ = pm.build_case(cfg)
    with fc.fake_cuda(fc.Recorder()):
        real = pm.dedupe_key(case, cfg, model, pm.synthetic_batch(cfg, dm))
    assert dryrun._meta_key(case, cfg, False) == real


def test_run_builds_a_duplicate_case_only_on_the_meta_device(monkeypatch):
    """Figure 2's grid repeats 90 shapes over 3,000 cases: after a key has run, its duplicates
    are never built for real (on CPU, ~1 s each at paper sizes)."""
    real_builds = []
    build = pm.build_case

    def counting(cfg):
        if torch.empty(0).device.type != "meta":
            real_builds.append(cfg)
        return build(cfg)
    cases = list(pm.paper_configs("toy"))[:1] * 3  # one case three times: one real build
    monkeypatch.setattr(pm, "paper_configs", lambda only: iter(cases))
    monkeypatch.setattr(pm, "build_case", counting)
    results, _ = dryrun.run(only="toy", log=lambda *a: None)
    assert len(real_builds) == 1 and len(results) == len(dryrun.PRECISIONS)
    assert all(r["status"] == "ok" for r in results), results


def test_dedupe_key_tells_regbench_widths_and_heads_apart_but_not_depths():
    """RegBench's blocks call their mixer `layer`: a key read from parameter names saw no mixer
    there and ran one Figure 2 case per mixer. Found by class, width and head count change the
    key (the kernels' head dim), the layer count does not (the same launches per layer)."""
    def key(d, h, n):
        case, cfg = next((c, cfg) for c, cfg in pm.paper_configs("fig2/regbench")
                         if {"mixer=zeros", f"backbone.d_model={d}", f"backbone.n_heads={h}",
                             f"backbone.n_layers={n}"} <= set(c.overrides))
        return dryrun._meta_key(case, cfg, False)
    assert key(64, 1, 1) is not None
    assert key(64, 1, 1) == key(64, 1, 4)
    assert len({key(64, 1, 1), key(128, 1, 1), key(64, 2, 1)}) == 3
