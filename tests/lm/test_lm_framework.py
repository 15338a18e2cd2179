"""The LM task inside the experiment framework: datamodule + objective metrics agree with the
standalone block evaluation; the Hydra configs compose; one tiny Lightning run end to end."""
import json

import pytest
import torch

from tasks.common.errors import ConfigError
from tasks.lm.data import build_token_cache
from tasks.lm.data import LMDataModule
from tasks.lm.objective import LMObjective
from tasks.lm.evaluate import evaluate_blocks
from tasks.lm.tokenizer import ByteTokenizer

from test_lm_model_eval import Bigram


def _dm(text_dir, tmp_path, **kw):
    data = dict(name="t", source="local", path=str(text_dir), cache_dir=str(tmp_path / "c"),
                files={"train": "train.txt", "valid": "valid.txt", "test": "test.txt"})
    return LMDataModule(data=data, tokenizer={"name": "byte"}, seq_len=32, batch_size=4,
                        eval_block=48, eval_batch_size=5, vocab_size=257, **kw)


def _test_metrics(dm, model):
    """The objective's metrics over the datamodule's test loader, as the test loop updates them."""
    dm.check()
    dm.setup("fit")
    obj = LMObjective()
    metrics = obj.metrics()
    with torch.no_grad():
        for batch in dm.test_dataloader():
            out = obj.step(model, batch, "test")
            for m in metrics.values():
                m.update(out.preds, out.target)
    return metrics


def test_objective_ppl_equals_block_evaluation(text_dir, tmp_path):
    dm, model = _dm(text_dir, tmp_path), Bigram(257)
    metrics = _test_metrics(dm, model)
    cache = build_token_cache(dm.data_cfg, ByteTokenizer())
    ref = evaluate_blocks(model, cache.tokens("test"), block=48, batch_size=5, eos_id=256)
    assert int(metrics["tokens"].compute()) == ref["tokens"] == len(cache.tokens("test"))
    assert float(metrics["ppl"].compute()) == pytest.approx(ref["ppl"], rel=1e-6)
    x = next(iter(dm.train_dataloader()))
    assert x["input"].shape == (4, 32) and bool((x["target"] >= 0).all())
    assert torch.equal(x["input"][:, 1:], x["target"][:, :-1])  # inputs = targets shifted


def test_datamodule_check_names_missing_data(text_dir, tmp_path):
    dm = _dm(text_dir, tmp_path)
    dm.data_cfg["path"] = None
    with pytest.raises(ConfigError, match="task.datamodule.data.path=DIR"):
        dm.check()
    dm.data_cfg.update(path=str(text_dir), files={"train": "gone.txt"})
    with pytest.raises(ConfigError, match="gone.txt"):
        dm.check()


def _compose(overrides):
    from hydra import compose, initialize_config_dir
    from tests_lm_paths import CONF
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=overrides)


@pytest.mark.parametrize("exp,paper_params", [("table2/wikitext103", 44_650_496),
                                              ("fig4/owt2", 124_439_808 + 47 * 768)])
def test_paper_configs_build_the_paper_models(exp, paper_params):
    from tasks.common.runner import build
    cfg = _compose([f"experiment={exp}", "profile=paper", "mixer=softmax", "logger=none",
                    "trainer.accelerator=cpu"])
    assert cfg.task.datamodule.seq_len * cfg.task.datamodule.batch_size * \
        cfg.trainer.accumulate_grad_batches == 65536
    with torch.device("meta"):
        _, model, _ = build(cfg, check_data=False)
    assert sum(p.numel() for p in model.parameters()) == paper_params


@pytest.mark.slow  # ~20 s of Lightning start-up on shared cores; `make test-slow`
def test_tiny_lightning_run(text_dir, tmp_path, monkeypatch):
    from tasks.common.runner import run
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = _compose(["experiment=table2/wikitext103", "profile=smoke", "logger=none",
                    "mixer=zeros", f"task.datamodule.data.path={text_dir}",
                    "backbone.n_layers=1", "backbone.d_model=32", "backbone.n_heads=2",
                    "backbone.d_ff=64", "task.datamodule.seq_len=32",
                    "task.datamodule.eval_block=32", "trainer.max_steps=4",
                    "trainer.val_check_interval=2", "trainer.limit_val_batches=2"])
    run(cfg)
    out = list((tmp_path / "root" / "results" / "runs" / "table2").glob("*.json"))
    assert len(out) == 1
    res = json.loads(out[0].read_text())
    lines = (text_dir / "test.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert res["metrics"]["final"]["test/tokens"] == sum(len(ln.strip().encode()) + 1
                                                         for ln in lines)
    assert 1.0 < res["metrics"]["final"]["test/ppl"] < 1000
    assert res["row"] == "ZeroS" and res["column"] == "wikitext103"
    # the framework checkpoint decodes with the recurrent state, equal to the parallel forward
    from tasks.lm.generate import generate, load_checkpoint
    ckpt = next((tmp_path / "root" / "outputs" / "runs" / "table2").glob("*/checkpoints/best.ckpt"))
    model, tok = load_checkpoint(ckpt)
    assert model.stateful and tok.name == "byte"
    ids, step_logits = generate(model.double(), torch.tensor([[256, 116, 104]]), 6,
                                generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(step_logits, model(ids)[:, 2:-1], rtol=1e-9, atol=1e-9)
