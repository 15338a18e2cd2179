"""Data pipeline of Table 4 on generated CSVs: splits, scaler, windows, leakage, missing files."""
import numpy as np
import pandas as pd
import pytest
import torch

from tasks.timeseries import data as tsdata
from tasks.common.errors import ConfigError
from tasks.timeseries.data import (DATASETS, ensure_file, git_blob_sha1,
                                   load_forecast_data, split_borders)
from tasks.timeseries.objective import ForecastObjective

ETTH_ROWS = 8640 + 2880 + 2880 + 50  # a real file has a tail beyond the test split


def write_ett_csv(path, n_rows=ETTH_ROWS, seed=0):
    """An ETT-shaped CSV whose first channel is the row index (so windows can be located)."""
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(n_rows, 7)).astype(np.float32)
    values[:, 0] = np.arange(n_rows)
    frame = pd.DataFrame(values, columns=["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"])
    frame.insert(0, "date", pd.date_range("2016-07-01", periods=n_rows, freq="h").astype(str))
    frame.to_csv(path, index=False)
    return values


@pytest.fixture(scope="module")
def etth(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ett")
    values = write_ett_csv(folder / "ETTh1.csv")
    return folder, values


def test_ett_hour_split_row_counts(etth):
    folder, _ = etth
    L, H = 336, 96
    d = load_forecast_data("ETTh1", folder, L, H, download=False)
    assert d.borders == {"train": (0, 8640), "val": (8640 - L, 11520), "test": (11520 - L, 14400)}
    # target rows per split = 8640 / 2880 / 2880; windows = rows - L - H + 1 for train,
    # and rows - H + 1 for val/test (their segments carry one extra lookback in front)
    assert len(d.splits["train"]) == 8640 - L - H + 1
    assert len(d.splits["val"]) == 2880 - H + 1
    assert len(d.splits["test"]) == 2880 - H + 1


def test_ett_minute_and_ratio_borders():
    b = split_borders("ett_minute", 70000, 512)
    assert b["train"] == (0, 34560) and b["val"] == (34560 - 512, 46080)
    assert b["test"] == (46080 - 512, 57600)
    n = 52696  # weather.csv has 52696 rows
    b = split_borders("ratio", n, 96)
    n_train, n_test = int(n * 0.7), int(n * 0.2)
    assert b["train"] == (0, n_train)
    assert b["val"] == (n_train - 96, n - n_test)
    assert b["test"] == (n - n_test - 96, n)


def test_scaler_fit_on_train_only(etth):
    folder, values = etth
    d = load_forecast_data("ETTh1", folder, 96, 24, download=False)
    train = values[:8640].astype(np.float64)
    np.testing.assert_allclose(d.scaler.mean, train.mean(0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(d.scaler.std, train.std(0), rtol=1e-6)
    assert d.scaler.mean[0] == 4319.5  # channel 0 is the row index 0..8639
    assert not np.allclose(d.scaler.mean[0], values[:14400, 0].mean())  # not the whole file
    train_rows = d.splits["train"].data.numpy()  # the scaled training segment
    np.testing.assert_allclose(train_rows.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(train_rows.std(0), 1, atol=1e-4)


def _row_index(d, scaled_first_channel):
    """Undo the scaling of channel 0, which holds the file's row index."""
    return np.rint(scaled_first_channel * d.scaler.std[0] + d.scaler.mean[0]).astype(int)


def test_window_alignment_and_no_leakage(etth):
    folder, _ = etth
    L, H = 96, 24
    d = load_forecast_data("ETTh1", folder, L, H, download=False)
    for split, first_target in (("train", L), ("val", 8640), ("test", 11520)):
        ds = d.splits[split]
        for i in (0, 7, len(ds) - 1):
            x, y = ds[i]
            rows_x, rows_y = _row_index(d, x[:, 0].numpy()), _row_index(d, y[:, 0].numpy())
            assert rows_x[-1] + 1 == rows_y[0]  # the target follows the input exactly
            assert np.all(np.diff(rows_x) == 1) and np.all(np.diff(rows_y) == 1)
            assert len(rows_x) == L and len(rows_y) == H
        assert _row_index(d, ds[0][1][:, 0].numpy())[0] == first_target
    # no look-ahead: the last training target row is the last row of the training split,
    # and no test/val target reaches past its split
    assert _row_index(d, d.splits["train"][len(d.splits["train"]) - 1][1][:, 0].numpy())[-1] == 8639
    assert _row_index(d, d.splits["val"][len(d.splits["val"]) - 1][1][:, 0].numpy())[-1] == 11519
    assert _row_index(d, d.splits["test"][len(d.splits["test"]) - 1][1][:, 0].numpy())[-1] == 14399


def test_missing_file_names_file_and_place(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise OSError("network unreachable")
    monkeypatch.setattr(tsdata.urllib.request, "urlopen", no_network)
    with pytest.raises(ConfigError) as err:
        ensure_file("ETTh2", tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and "ETTh2.csv" in msg and str(tmp_path / "ETTh2.csv") in msg
    assert "ETDataset" in msg
    # never falls back to another file that is present
    write_ett_csv(tmp_path / "ETTh1.csv", n_rows=10)
    with pytest.raises(ConfigError):
        ensure_file("ETTh2", tmp_path)
    with pytest.raises(ConfigError, match="weather.csv"):
        ensure_file("weather", tmp_path)


class _FakeResponse:
    def __init__(self, payload):
        self.payload = payload

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self):
        return self.payload


def test_download_is_checksum_verified(tmp_path, monkeypatch):
    good = b"date,a\n2016-07-01,1\n"
    spec = DATASETS["ETTh1"]
    monkeypatch.setitem(DATASETS, "ETTh1", tsdata.DatasetSpec(
        **{**spec.__dict__, "git_blob_sha1": git_blob_sha1(good)}))
    monkeypatch.setattr(tsdata.urllib.request, "urlopen", lambda *a, **k: _FakeResponse(good))
    assert ensure_file("ETTh1", tmp_path).read_bytes() == good
    monkeypatch.setattr(tsdata.urllib.request, "urlopen",
                        lambda *a, **k: _FakeResponse(b"tampered"))
    with pytest.raises(RuntimeError, match="checksum mismatch"):
        ensure_file("ETTh1", tmp_path / "other")
    assert not (tmp_path / "other" / "ETTh1.csv").exists()


def test_git_blob_checksum_matches_git():
    # `printf 'hello\n' | git hash-object --stdin`
    assert git_blob_sha1(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_metrics_hand_computed():
    # the metrics the runs report (ForecastObjective: torchmetrics sums over all elements)
    metrics = ForecastObjective().metrics()
    pred = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])  # [B=1, H=2, C=2]
    target = torch.tensor([[[0.0, 2.0], [5.0, 1.0]]])
    batches = [(pred[:, :1], target[:, :1]), (pred[:, 1:], target[:, 1:]),
               (torch.zeros(2, 1, 2), torch.zeros(2, 1, 2))]  # unequal batch sizes
    for p, t in batches:
        for m in metrics.values():
            m.update(p.flatten(), t.flatten())
    # errors: 1, 0, -2, 3 and four zeros -> MSE = (1+0+4+9)/8, MAE = (1+0+2+3)/8
    assert metrics["mse"].compute().item() == pytest.approx(14 / 8)
    assert metrics["mae"].compute().item() == pytest.approx(6 / 8)
