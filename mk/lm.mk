# Language modelling (issue 7): Table 2 (WikiText-103) and Figure 4 (OpenWebText2). docs/lm.md.
# The framework targets `make reproduce-table2` / `make reproduce-fig4` (mk/framework.mk) run the
# Lightning path; the smoke profile has no default data, so pass it:
#   make reproduce-table2 ARGS="task.datamodule.data.path=../shared/data/wikitext-2"
# The lm-* targets below run the standalone runner (tasks/lm/reproduce.py) with LM_DATA=DIR.
LM_DATA ?=
LM_ARGS ?=
LM_DATA_ARG = $(if $(LM_DATA),data.path=$(LM_DATA))
.PHONY: lm-data-table2 lm-data-fig4 lm-table2 lm-fig4 lm-generate test-lm

lm-data-table2: ## Tokenise Table 2's data once into results/lm/cache (paper: WikiText-103 + GPT-2 BPE)
	$(PY) -m tasks.lm.prepare table2 --profile $(PROFILE) $(LM_DATA_ARG) $(LM_ARGS)

lm-data-fig4: ## Tokenise Figure 4's data once (paper: OpenWebText2 streamed, 1.7B-token budget)
	$(PY) -m tasks.lm.prepare fig4 --profile $(PROFILE) $(LM_DATA_ARG) $(LM_ARGS)

lm-table2: ## Standalone Table 2 runner: every mixer, table with paper numbers (LM_DATA=DIR for smoke)
	$(PY) -m tasks.lm.reproduce table2 --profile $(PROFILE) $(LM_DATA_ARG) $(LM_ARGS)

lm-fig4: ## Standalone Figure 4 runner: loss curves PNG + table (LM_DATA=DIR for smoke)
	$(PY) -m tasks.lm.reproduce fig4 --profile $(PROFILE) $(LM_DATA_ARG) $(LM_ARGS)

lm-generate: ## Sample from an LM checkpoint with the recurrent state: CKPT=.../model.pt PROMPT="..."
	$(PY) -m tasks.lm.generate --ckpt $(CKPT) --prompt "$(PROMPT)" --tokens 200

test-lm: ## LM tests only (tests/lm)
	$(PY) -m pytest -q tests/lm

# paper profile: tokenise once before the sweep (parallel runs would otherwise race to build it)
ifeq ($(PROFILE),paper)
reproduce-table2: lm-data-table2
reproduce-fig4: lm-data-fig4
endif
