##@ Time series: Table 4 (docs/timeseries.md)
# Time-series forecasting (Table 4): tasks/timeseries/, docs/timeseries.md.
# `make reproduce-table4 PROFILE=smoke|cpu|paper DATA_DIR=/path/to/files` runs the framework's
# sweep (mk/framework.mk) over conf/experiment/table4/; DATA_DIR (no default on purpose) is the
# folder holding ETTh1.csv ... solar_AL.txt and becomes task.datamodule.data_dir.
.PHONY: test-timeseries

ifdef DATA_DIR
reproduce-table4: override ARGS += task.datamodule.data_dir=$(abspath $(DATA_DIR))
endif
# CPU runs use one torch thread: the smoke model's matrices are tiny, and on a shared 2-core
# machine a second OpenMP thread made each step 5-10x slower (measured), not faster. PROFILE=cpu:
# the framework's driver runs JOBS=2 runs at once with cpu_count/2 threads each (mk/framework.mk).
ifeq ($(PROFILE),smoke)
reproduce-table4: export OMP_NUM_THREADS = 1
endif

test-timeseries: ## Time-series tests only (tests/timeseries)
	$(PY) -m pytest -q tests/timeseries $(XDIST)
