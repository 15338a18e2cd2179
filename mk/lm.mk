##@ Language modelling: Table 2, Figure 4 (docs/lm.md)
# Language modelling: Table 2 (WikiText-103) and Figure 4 (OpenWebText2), run by the framework's
# `make reproduce-table2|reproduce-fig4` (mk/framework.mk). See docs/lm.md. The smoke profile has
# no default data: make reproduce-table2 ARGS="task.datamodule.data.path=DIR"; PROFILE=cpu
# trains on WikiText-2 (DIR holding its raw valid.txt and test.txt, e.g. ../shared/data/wikitext-2)
.PHONY: generate test-lm

generate: ## Sample from an LM run's checkpoint with the recurrent state: CKPT=.../best.ckpt PROMPT="..."
	@$(if $(CKPT),,echo "error: make generate needs CKPT=<run dir>/checkpoints/best.ckpt (an LM run's, e.g. of make reproduce-table2)" >&2; exit 2)
	$(PY) -m tasks.lm.generate --ckpt $(CKPT) --prompt "$(PROMPT)" --tokens 200

test-lm: ## LM tests only (tests/lm)
	$(PY) -m pytest -q tests/lm $(XDIST)

# paper and cpu profiles: tokenise once from the same config before the sweep (parallel runs,
# JOBS=2 at PROFILE=cpu, would race on the token cache)
ifneq ($(filter paper cpu,$(PROFILE)),)
reproduce-table2: data-table2
endif
ifeq ($(PROFILE),paper)
reproduce-fig4: data-fig4
endif
.PHONY: data-table2 data-fig4
data-table2:
	@$(PY) -m tasks.lm.prepare --before-training experiment=table2/wikitext103 profile=$(PROFILE) $(ARGS)
data-fig4:
	@$(PY) -m tasks.lm.prepare --before-training experiment=fig4/owt2 profile=$(PROFILE) $(ARGS)
