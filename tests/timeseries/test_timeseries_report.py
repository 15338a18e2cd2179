"""Table 4's writer (tasks/timeseries/report.py): a cell is the mean ± std over seeds."""
from __future__ import annotations

import pandas as pd
import pytest

from tasks.timeseries.report import collect


def test_collect_is_the_mean_over_seeds_not_the_best_seed():
    # two lr per seed (the better val MSE of each seed is kept), three seeds: the cell is the
    # mean of the three kept runs; picking the seed with the best val MSE (0.5) would say 0.30
    runs = pd.DataFrame([
        {"row": "ZeroS", "column": "ETTh1", "setting": "h96_Lprotocol", "seed": s, "lr": lr,
         "best:val/mse": v, "best:test/mse": t, "best:test/mae": t + 0.1, "wall_time_s": 10.0,
         "profile": "cpu"}
        for s, lr, v, t in [(0, 1, 0.6, 0.40), (0, 2, 0.9, 0.90), (1, 1, 0.5, 0.30),
                            (1, 2, 0.7, 0.80), (2, 1, 0.8, 0.70), (2, 2, 0.7, 0.50)]])
    line = collect(runs).iloc[0]
    assert line["n_seeds"] == 3 and line["wall_s"] == 30.0
    assert line["mse"] == pytest.approx((0.40 + 0.30 + 0.50) / 3)
    assert line["mse_std"] == pytest.approx(pd.Series([0.40, 0.30, 0.50]).std(ddof=1))
