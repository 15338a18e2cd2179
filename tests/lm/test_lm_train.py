"""Schedule, a tiny end-to-end run (train -> eval -> table -> figure -> reuse), generate CLI."""
import json
import math

import pytest
from omegaconf import OmegaConf

from tasks.lm import generate as lm_generate
from tasks.lm.profiles import get_config
from tasks.lm.reproduce import plot_curves, run_experiment, write_table
from tasks.lm.train import lr_at


def test_inverse_sqrt_and_cosine_schedules():
    t = OmegaConf.create(dict(lr=5e-4, warmup=4000, warmup_init_lr=1e-7, schedule="inverse_sqrt",
                              max_updates=50000))
    assert lr_at(1, t) == pytest.approx(1e-7 + (5e-4 - 1e-7) / 4000)
    assert lr_at(4000, t) == pytest.approx(5e-4)
    assert lr_at(16000, t) == pytest.approx(2.5e-4)  # lr · sqrt(4000 / 16000)
    t = OmegaConf.create(dict(lr=1e-3, warmup=300, schedule="cosine", max_updates=25000,
                              min_lr=0.0))
    assert lr_at(300, t) == pytest.approx(1e-3)
    assert lr_at(25000, t) == pytest.approx(0.0, abs=1e-12)
    assert lr_at(12650, t) == pytest.approx(5e-4)


def _tiny_cfg(text_dir, tmp_path, mixers):
    return get_config("table2", "smoke", [
        f"data.path={text_dir}", f"data.cache_dir={tmp_path / 'cache'}",
        f"out_root={tmp_path / 'lm'}", f"mixers={mixers}", "model.n_layers=1",
        "model.d_model=32", "model.n_heads=2", "model.d_ff=64", "train.seq_len=32",
        "train.micro_batch=2", "train.tokens_per_update=128", "train.max_updates=2",
        "train.warmup=1", "train.eval_every=1", "train.eval_max_blocks=4", "train.threads=1",
        "eval.block=128", "eval.batch_size=32"])


@pytest.fixture
def restore_threads():
    import torch
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)  # train_one sets the process-wide thread count


def test_tiny_end_to_end_run(text_dir, tmp_path, capsys, restore_threads):
    cfg = _tiny_cfg(text_dir, tmp_path, "[zeros]")
    rows = run_experiment(cfg)
    assert [r["mixer"] for r in rows] == ["zeros"]
    # smoke default: train on valid.txt, test on test.txt; tokens = stripped line bytes + eos
    lines = (text_dir / "test.txt").read_text(encoding="utf-8").split("\n")[:-1]
    n_test = sum(len(ln.strip().encode()) + 1 for ln in lines)
    for r in rows:
        assert r["test_tokens"] == n_test  # every test token scored once
        assert math.isfinite(r["valid_ppl"]) and 1.0 < r["test_ppl"] < 257 * 4
        assert r["test_ppl"] == pytest.approx(math.exp(r["test_loss"]))
    md = write_table(rows, cfg, tmp_path / "out")
    assert "| ZeroS |" in md and "profile smoke" in md
    assert "| 23.91 | 24.61 | 46.31M |" in md  # the paper's ZeroS numbers sit next to ours
    plot_curves(rows, cfg, tmp_path / "out" / "fig.png")
    assert (tmp_path / "out" / "fig.png").stat().st_size > 1000
    hist = (tmp_path / "lm" / "runs").glob("zeros-*/history.csv")
    assert len(next(hist).read_text().splitlines()) == 3  # header + evals at updates 1 and 2
    capsys.readouterr()
    again = run_experiment(cfg)  # finished runs are reused, not retrained
    assert "reuse" in capsys.readouterr().out
    assert [r["test_ppl"] for r in again] == [r["test_ppl"] for r in rows]
    # generate CLI from the ZeroS checkpoint (recurrent decoding)
    ckpt = next((tmp_path / "lm" / "runs").glob("zeros-*/model.pt"))
    assert lm_generate.main(["--ckpt", str(ckpt), "--prompt", "the", "--tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("the")
    meta = json.loads(next((tmp_path / "lm" / "runs").glob("zeros-*/metrics.json")).read_text())
    assert meta["tokenizer"]["name"] == "byte" and meta["params"] > 0


def test_smoke_profile_has_no_default_data_path(tmp_path):
    from tasks.lm.errors import LMDataError
    cfg = get_config("table2", "smoke", [f"out_root={tmp_path}", "mixers=[zeros]",
                                         f"data.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(LMDataError, match="data.path=DIR"):
        run_experiment(cfg)
    assert not (tmp_path / "cache").exists()  # nothing is written before the sources open
