"""Time-series forecasting (Table 4): data, the decoder-only forecaster, baselines, metrics."""
