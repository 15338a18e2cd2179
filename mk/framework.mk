# Experiment framework: training entry point, sweeps, tables. See docs/framework.md.
REPRODUCE_TABLES := table1 table2 table3 table4 ablation fig2 fig3 fig4 toy
.PHONY: train tables test-framework $(addprefix reproduce-,$(REPRODUCE_TABLES))

train: ## One training run: make train ARGS="mixer=gla task=toy_recall" (PROFILE=smoke|paper)
	$(PY) -m tasks.train profile=$(PROFILE) $(ARGS)

tables: ## Regenerate every table/figure from results/runs/ (results/tables/, results/figures/)
	$(PY) -m tasks.common.tables

test-framework: ## Framework tests only (tests/framework)
	$(PY) -m pytest -q tests/framework

reproduce-table1: ## Table 1 (MAD): sweep + table, PROFILE=smoke|paper
reproduce-table2: ## Table 2 (WikiText-103): sweep + table, PROFILE=smoke|paper
reproduce-table3: ## Table 3 (ImageNet, DeiT-Tiny): sweep + table, PROFILE=smoke|paper
reproduce-table4: ## Table 4 (time series): sweep + table, PROFILE=smoke|paper
reproduce-ablation: ## Ablation (WikiText-103 + MAD): sweep + table, PROFILE=smoke|paper
reproduce-fig2: ## Figure 2 (RegBench): sweep + figure, PROFILE=smoke|paper
reproduce-fig3: ## Figure 3 (MQAR): sweep + figure, PROFILE=smoke|paper
reproduce-fig4: ## Figure 4 (OpenWebText2 curves): sweep + figure, PROFILE=smoke|paper
reproduce-toy: ## The framework's toy table (2 runs x 50 steps, CPU): sweep + table
$(addprefix reproduce-,$(REPRODUCE_TABLES)): reproduce-%:
	@$(PY) -m tasks.common.reproduce $* --profile $(PROFILE) $(ARGS)
