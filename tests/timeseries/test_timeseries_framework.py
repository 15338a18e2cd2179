"""The framework plug-in of Table 4: datamodule checks, objective metrics, one tiny fit."""
import re

import numpy as np
import pytest
import torch

from tasks.common.errors import ConfigError
from tasks.timeseries import data as tsdata
from tasks.timeseries.data import ForecastDataModule
from tasks.timeseries.objective import ForecastObjective
from tasks.timeseries.model import build_forecaster

from test_timeseries_data import write_ett_csv


def _squash(md: str) -> str:  # the cells, not the widths pandas/tabulate pad the columns to
    return re.sub(r" {2,}", " ", md)


def test_datamodule_check_names_the_fix(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="data_dir is not set"):
        ForecastDataModule("ETTh1", 96, data_dir=None).check()
    monkeypatch.setattr(tsdata.urllib.request, "urlopen",
                        lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    with pytest.raises(ConfigError, match="ETTh1.csv not found: put it at"):
        ForecastDataModule("ETTh1", 96, data_dir=tmp_path).check()
    with pytest.raises(ConfigError, match="unknown dataset"):
        ForecastDataModule("ETTx", 96, data_dir=tmp_path).check()


def test_objective_metrics_and_losses():
    obj = ForecastObjective()
    metrics = obj.metrics()
    model = build_forecaster(None, model="dlinear", dataset="ETTh1", horizon=8, lookback=32)
    x, y = torch.randn(4, 32, 7), torch.randn(4, 8, 7)
    out = obj.step(model, (x, y), "val")
    for m in metrics.values():
        m.update(out.preds, out.target)
    with torch.no_grad():
        err = model(x) - y
    assert metrics["mse"].compute().item() == pytest.approx(err.pow(2).mean().item(), rel=1e-5)
    assert metrics["mae"].compute().item() == pytest.approx(err.abs().mean().item(), rel=1e-5)
    assert out.loss.item() == pytest.approx(err.pow(2).mean().item(), rel=1e-5)


def test_datamodule_loaders_on_generated_file(tmp_path):
    write_ett_csv(tmp_path / "ETTh2.csv")
    dm = ForecastDataModule("ETTh2", 96, lookback=192, data_dir=tmp_path, batch_size=16,
                            download=False)
    dm.check()
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (16, 192, 7) and y.shape == (16, 96, 7)
    assert len(dm.val_dataloader().dataset) == 2880 - 96 + 1
    assert np.isclose(dm.data.scaler.mean[0], 4319.5)


def test_report_picks_best_val_and_names_profile(tmp_path):
    import pandas as pd

    from tasks.timeseries.report import write_table4
    runs = pd.DataFrame([
        {"row": "ZeroS", "column": "ETTh1", "setting": "h96_L512", "profile": "smoke",
         "best:val/mse": 0.70, "best:test/mse": 0.39, "best:test/mae": 0.41, "wall_time_s": 100.0},
        {"row": "ZeroS", "column": "ETTh1", "setting": "h96_L512", "profile": "smoke",  # worse val
         "best:val/mse": 0.80, "best:test/mse": 0.10, "best:test/mae": 0.10, "wall_time_s": 50.0},
        {"row": "DLinear", "column": "ETTh1", "setting": "h96_L512", "profile": "smoke",
         "best:val/mse": 0.71, "best:test/mse": 0.40, "best:test/mae": 0.43, "wall_time_s": 40.0}])
    from tasks.common.protocol import load_spec
    spec = load_spec("table4")
    path = write_table4(runs, spec, tmp_path / "figures")
    text = _squash((tmp_path / "tables" / "table4.md").read_text())
    assert path.endswith("tables/table4.md") and "profile: **smoke**" in text
    assert "| ETTh1 | 96 | 512 | ZeroS | 0.390 / — | 0.410 / — | — | — | — | 100 |" in text
    paper = spec["paper"]["ZeroS"]["ETTh1"]["mse"]  # the paper's number, read from conf/table
    # a partial average shows the paper's number but no difference: it is not the same quantity
    assert f"| ETTh1 | avg of 96 | 512 | ZeroS | 0.390 / {paper:.3f} | 0.410 / — | — | — | — | 100 |" in text
    assert (tmp_path / "tables" / "table4.tex").read_text().count("ETTh1 & 96 & 512 & ZeroS & 0.390 / --") == 1
    from tasks.timeseries.report import _lookback
    assert _lookback("h720_Lprotocol") == "4096" and _lookback("h96_L512") == "512"
    csv = pd.read_csv(tmp_path / "tables" / "table4.csv")
    assert set(csv["model"]) >= {"ZeroS", "DLinear"}


def test_render_states_the_difference_on_the_full_average_and_the_epochs():
    import pandas as pd

    from tasks.common.protocol import load_spec
    from tasks.timeseries.report import collect, render
    spec = load_spec("table4")
    paper = spec["paper"]["ZeroS"]["ETTh1"]["mse"]
    runs = pd.DataFrame([
        {"row": "ZeroS", "column": "ETTh1", "setting": f"h{h}_Lprotocol", "profile": "cpu",
         "best:val/mse": 0.7, "best:test/mse": mse, "best:test/mae": 0.4, "wall_time_s": 10.0,
         "best:epoch": 3, "final:epoch": 15}
        for h, mse in [(96, 0.40), (192, 0.42), (336, 0.44), (720, 0.46)]])
    text, frame = render(collect(runs), "cpu", spec)
    text = _squash(text)
    assert "| ETTh1 | 96 | 1024 | ZeroS | 0.400 / — | 0.400 / — | — | — | 16 (4) | 10 |" in text
    diff = 0.43 - paper  # mean of the four horizons minus the paper's average
    assert (f"| ETTh1 | avg | 1024,2048,4096 | ZeroS | 0.430 / {paper:.3f} | 0.400 / — | "
            f"{diff:+.3f} | — | — | 40 |") in text
    # with the reference runs: every cell is ours / reference / paper (here the reference = ours)
    text, frame = render(collect(runs), "cpu", spec, ref=collect(runs))
    text = _squash(text)
    assert f"| ETTh1 | avg | 1024,2048,4096 | ZeroS | 0.430 / 0.430 / {paper:.3f} | " in text
    assert "| ETTh1 | 96 | 1024 | ZeroS | 0.400 / 0.400 / — | 0.400 / 0.400 / — |" in text
    assert "ref_mse" in frame
    avg = frame[(frame["horizon"] == "avg") & (frame["model"] == "ZeroS") & (frame["dataset"] == "ETTh1")]
    assert abs(avg["diff_mse"].iloc[0] - diff) < 1e-12 and pd.isna(avg["diff_mae"].iloc[0])
