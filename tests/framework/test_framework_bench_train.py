"""make bench-train: one table at smoke size, composed from the configs, writes its CSV."""
import pandas as pd

from tasks.bench_train import run


def test_bench_train_writes_csv(tmp_path):
    out = tmp_path / "train.csv"
    run(["table4"], ["smoke"], ["zeros", "softmax"], reps=1, out=str(out), max_batch=4,
        peak=False)
    df = pd.read_csv(out).set_index("mixer")
    assert set(df.index) == {"zeros", "softmax"} and "note" not in df
    assert (df.layer_s > 0).all() and (df.step_s > 0).all() and (df["T"] > 1).all()
    assert df.loc["softmax", "step_vs_softmax"] == 1.0 and df.loc["zeros", "batch"] == 4
