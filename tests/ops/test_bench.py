"""The CPU benchmark runs end to end at a tiny size and writes its CSV."""
import pandas as pd

from zeros.bench import run


def test_bench_writes_csv(tmp_path):
    out = tmp_path / "bench.csv"
    run([64], ["chunk", "sdpa", "materialized"], reps=1, out=str(out))
    df = pd.read_csv(out)
    assert set(df.method) == {"chunk", "sdpa", "materialized"}
    assert (df.fwd_bwd_s > 0).all() and df.peak_mib.notna().all()
    assert df.set_index("method").loc["chunk", "time_vs_chunk"] == 1.0
