"""make bench-train: one table at smoke size, composed from the configs, writes its CSV."""
import pandas as pd
import pytest

from tasks.bench_train import main, run


def test_bench_train_writes_csv(tmp_path):
    out = tmp_path / "train.csv"
    run(["table4"], ["smoke"], ["zeros", "softmax"], reps=1, out=str(out), max_batch=4,
        peak=False)
    df = pd.read_csv(out).set_index("mixer")
    assert set(df.index) == {"zeros", "softmax"} and "note" not in df
    assert (df.layer_s > 0).all() and (df.step_s > 0).all() and (df["T"] > 1).all()
    assert df.loc["softmax", "step_vs_softmax"] == 1.0 and df.loc["zeros", "batch"] == 4


@pytest.mark.parametrize("argv", [["--tables", "tabel1"], ["--profiles", "cpux"]])
def test_bench_train_refuses_an_unknown_table_or_profile_before_writing(argv, tmp_path):
    out = tmp_path / "train.csv"  # the typo once ran nothing and overwrote the committed CSV
    with pytest.raises(SystemExit) as e:
        main([*argv, "--out", str(out)])
    assert e.value.code == 2 and not out.exists()


def test_synthetic_batch_is_the_datamodules_example_batch_at_the_capped_size():
    from tasks.bench_train import synthetic_batch
    from tasks.toy.data import ToyRecallDataModule
    dm = ToyRecallDataModule(vocab_size=16, seq_len=9, batch_size=32)
    batch = synthetic_batch(dm, max_batch=4)
    assert {k: tuple(v.shape) for k, v in batch.items()} == {"input": (4, 9), "target": (4, 9)}
    assert int(batch["input"].max()) < 16
    assert synthetic_batch(dm)["input"].shape[0] == 32

    class NoExample:
        batch_size = 8
    with pytest.raises(NotImplementedError, match="NoExample has no example_batch"):
        synthetic_batch(NoExample())
