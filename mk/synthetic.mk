##@ Synthetic: Table 1, ablation, Figures 2-3 (docs/synthetic.md)
# Synthetic benchmarks: MAD (Table 1, ablation), MQAR (Figure 3), RegBench (Figure 2), run by
# `make reproduce-table1|reproduce-ablation|reproduce-fig2|reproduce-fig3` (mk/framework.mk) over
# conf/experiment/{table1,ablation,fig2,fig3}/. See docs/synthetic.md.
.PHONY: test-synthetic

test-synthetic: ## Synthetic-benchmark tests only (tests/synthetic; add ARGS="-m slow" for the long ones)
	$(PY) -m pytest -q tests/synthetic $(XDIST) $(ARGS)
