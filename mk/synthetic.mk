# Synthetic benchmarks (issue 4): MAD (Table 1, ablation), MQAR (Figure 3), RegBench (Figure 2).
# `make reproduce-table1|reproduce-ablation|reproduce-fig2|reproduce-fig3 PROFILE=smoke|paper`
# come from mk/framework.mk and run conf/experiment/{table1,ablation,fig2,fig3}/. See docs/synthetic.md.
.PHONY: test-synthetic mad-report mad-configs mad-smoke-one

test-synthetic: ## Synthetic-benchmark tests only (tests/synthetic; add ARGS="-m slow" for the long ones)
	$(PY) -m pytest -q tests/synthetic $(ARGS)

mad-configs: ## Rewrite the generated MAD experiment files (conf/experiment/{table1,ablation}/mad_*.yaml)
	$(PY) -m tasks.mad.make_configs

mad-report: ## MAD tables with macro AND micro accuracy: results/tables/table1_mad.md, ablation_mad.md
	$(PY) -m tasks.mad.report --profile $(PROFILE)

mad-smoke-one: ## One short MAD run end to end (ZeroS, in-context recall baseline, smoke profile)
	$(PY) -m tasks.train experiment=table1/mad_recall profile=smoke mixer=zeros $(ARGS)
