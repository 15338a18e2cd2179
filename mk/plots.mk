##@ Learning curves
# Learning curves from the local CSVs (no W&B needed). See tasks/common/curves.py.
.PHONY: plots

plots: ## Learning curves of a table's runs (metrics.csv): make plots TABLE=toy [PROFILE=smoke] -> results/figures/<profile>/<table>_curves.png
	@$(if $(TABLE),,echo "error: make plots needs TABLE=<table>, e.g. make plots TABLE=toy PROFILE=smoke" >&2; exit 2)
	@$(PY) -m tasks.common.curves $(TABLE) --profile $(PROFILE) $(ARGS)
