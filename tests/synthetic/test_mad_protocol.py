"""MAD protocol options matched to mad-lab, on tiny hand-made cases: the reported checkpoint
(lowest test perplexity) and the kept best-accuracy extra, the per-batch macro mean against the
pooled macro, the pre-fix selective-copying scoring, and the layer choices per row."""
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from tasks.mad.data import generate_split
from tasks.mad.settings import PRE_FIX_COPY_TOKENS, resolve_setting
from tasks.synthetic_common.objective import (BatchMeanMacroAccuracy, BatchMeanPerplexity,
                                              PooledAccuracy)

CONF = Path(__file__).resolve().parents[2] / "conf"


def _compose(extra=(), experiment="table1/mad", profile="smoke"):
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("train", [f"experiment={experiment}", f"profile={profile}", *extra])


# two evaluation batches, [B, T] targets (-100 unscored) and predicted ids
B1_T, B1_P = [[0, 0, 1, 1]], [[0, 0, 1, 0]]  # class 0: 2/2, class 1: 1/2        -> macro 0.75
B2_T, B2_P = [[0, 2, 2, -100]], [[1, 2, 2, 0]]  # class 0: 0/1, 1: predicted only (0), 2: 2/2
B2_MACRO = 1 / 3                                  # -> macro (0 + 0 + 1) / 3
POOLED = (2 / 3 + 1 / 2 + 1) / 3                 # class 0: 2/3, class 1: 1/2, class 2: 2/2


def _feed(metric, batches):
    for t, p in batches:
        metric.update(torch.tensor(p), torch.tensor(t))
    return float(metric.compute())


def test_reported_accuracy_is_the_mean_of_per_batch_macro_accuracies():
    batches = [(B1_T, B1_P), (B2_T, B2_P)]
    assert _feed(BatchMeanMacroAccuracy(4), batches) == pytest.approx((0.75 + B2_MACRO) / 2)
    assert _feed(PooledAccuracy(4, "macro"), batches) == pytest.approx(POOLED)
    assert _feed(PooledAccuracy(4, "micro"), batches) == pytest.approx(5 / 7)
    assert (0.75 + B2_MACRO) / 2 != pytest.approx(POOLED)  # the two definitions differ here


def test_per_batch_mean_weights_batches_by_their_sequences_and_takes_logits():
    # batch 1 as two sequences of 2 (B=2) weighs twice batch 2 (B=1), as Lightning's epoch mean
    two_rows = (np.reshape(B1_T, (2, 2)).tolist(), np.reshape(B1_P, (2, 2)).tolist())
    got = _feed(BatchMeanMacroAccuracy(4), [two_rows, (B2_T, B2_P)])
    assert got == pytest.approx((2 * 0.75 + B2_MACRO) / 3)
    m = BatchMeanMacroAccuracy(4)  # logits [B, T, V]: argmax first, as mad-lab's Accuracy
    m.update(torch.nn.functional.one_hot(torch.tensor(B1_P), 4).float(), torch.tensor(B1_T))
    assert float(m.compute()) == pytest.approx(0.75)


def test_checkpoint_monitor_is_the_mean_of_per_batch_perplexities():
    # batch 1: one scored token with p(target) = 1/2 -> ppl 2; batch 2: two scored tokens with
    # p = 1/4 (the third ignored) -> ppl 4; mean 3 (pooled over the 3 tokens: 2^(5/3) = 3.17)
    def logits(p_target, n=4):  # [T, n] logits whose softmax gives p_target to class 0
        rest = (1 - p_target) / (n - 1)
        return torch.log(torch.stack([p_target, *[rest] * (n - 1)], dim=-1))
    m = BatchMeanPerplexity()
    m.update(logits(torch.tensor([0.5]))[None], torch.tensor([[0]]))
    m.update(logits(torch.tensor([0.25, 0.25, 0.5]))[None], torch.tensor([[0, 0, -100]]))
    assert float(m.compute()) == pytest.approx((2 + 4) / 2, rel=1e-5)


def test_mad_reports_the_lowest_test_perplexity_checkpoint_and_keeps_best_accuracy_as_extra():
    from tasks.common.callbacks import pick_row
    t = _compose(["mad_task=memorization"]).task
    assert (t.monitor, t.monitor_mode, t.report) == ("val/ppl", "min", "best")
    assert (t.stop_at, t.stop_monitor, t.stop_mode) == (0.999, "val/acc", "max")
    extra = t.extra_metrics.acc_best_epoch
    assert (extra.metric, extra.pick) == ("val/acc_pooled", "max")
    history = [{"step": 100, "val/ppl": 3.0, "val/acc": 0.50, "val/acc_pooled": 0.52},
               {"step": 200, "val/ppl": 2.0, "val/acc": 0.40, "val/acc_pooled": 0.41},
               {"step": 300, "val/ppl": 2.5, "val/acc": 0.60, "val/acc_pooled": 0.63}]
    assert pick_row(history, t.monitor, t.monitor_mode)["step"] == 200  # mad-lab's checkpoint
    assert pick_row(history, extra.metric, extra.pick)["step"] == 300  # the suite's old number


def test_selective_copy_pre_fix_scores_16_tokens_in_every_setting():
    fixed = resolve_setting("selective-copying", "copy32", num_train=2, num_test=2)
    pre = resolve_setting("selective-copying", "copy32", num_train=2, num_test=2, copy_pre_fix=True)
    assert PRE_FIX_COPY_TOKENS == 16 and fixed["seq_len"] == pre["seq_len"] == 256
    for setting, n in ((fixed, 32), (pre, 16)):
        y = generate_split(setting, "test", seed=0)["targets"]
        scored = np.flatnonzero(y[0] != -100)
        np.testing.assert_array_equal(scored, np.arange(256 - n, 256))  # the last n positions
    other = resolve_setting("in-context-recall", "baseline", copy_pre_fix=True)
    assert other == resolve_setting("in-context-recall", "baseline")  # other tasks unchanged
    assert _compose().task.datamodule.copy_pre_fix is False  # default: the fixed scoring


def _attention_layers(model, cls_name):
    return [m for m in model.modules() if type(m).__name__ == cls_name]


def test_mad_attention_rows_keep_rope_and_an_explicit_mixer_kwarg_wins():
    # mad-lab's mh-attention.yml has rotary_emb_dim 8 = the head dim (tests/synthetic/
    # test_original_parity.py checks the rotation); ZeroS keeps its RoPE (part of the layer)
    from tasks.common.runner import build
    for mixer, cls in (("softmax", "SoftmaxAttention"), ("zeros", None), ("zeros_sm", None)):
        _, model, _ = build(_compose(["mad_task=memorization", f"mixer={mixer}"]),
                            check_data=False)
        layers = (_attention_layers(model, cls) if cls else
                  [m for m in model.modules() if hasattr(m, "rope_style")])
        assert len(layers) == 2 and all(m.rope is True for m in layers)
    # an explicit mixer kwarg wins over the experiment's per-row choice (LinAttn's eps 1e-12)
    cfg = _compose(["mad_task=memorization", "mixer=linear_attn", "+mixer.kwargs.eps=1e-6"])
    _, model, _ = build(cfg, check_data=False)
    layers = _attention_layers(model, "LinearAttention")
    assert len(layers) == 2 and all(m.eps == 1e-6 and m.feature_map == "hadamard" for m in layers)


def test_eval_batch_size_batches_the_test_set_only():
    from tasks.mad.data import MADDataModule
    dm = MADDataModule("memorization", batch_size=4, num_test=12, eval_batch_size=8)
    dm.setup()
    assert [len(b["input"]) for b in dm.val_dataloader()] == [8, 4]
    assert len(next(iter(dm.train_dataloader()))["input"]) == 4
    assert MADDataModule("memorization", batch_size=4).eval_batch_size == 4  # default: the same
