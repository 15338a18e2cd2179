##@ W&B (offline runs under outputs/runs/<table>/<id>/wandb/)
# W&B dashboards (docs/framework.md "W&B dashboards"): runs log offline by default (no network);
# `make wandb-sync` uploads the offline runs under outputs/ (or $ZEROS_ROOT/outputs) once you are
# logged in (`wandb login`). TABLE=table1 syncs one table's runs only.
.PHONY: wandb-sync

WANDB_RUNS = $(if $(ZEROS_ROOT),$(ZEROS_ROOT),.)/outputs/runs$(if $(TABLE),/$(TABLE))

wandb-sync: ## Upload the offline W&B runs (outputs/runs/, TABLE=... for one table); needs `wandb login`
	@$(PY) -m tasks.common.wandb_log sync $(WANDB_RUNS)
