##@ Tables and runs (docs/framework.md)
# Experiment framework: training entry point, sweeps, tables. See docs/framework.md.
# reproduce-<table> is one pattern rule for every table (conf/experiment/<table>/): a new table
# needs no line here; the lines below only document the paper's tables in `make help`. Not
# .PHONY (make skips the pattern rule for a phony target).
.PHONY: train tables status plan reference test-framework

train: ## One training run: make train ARGS="mixer=gla task=toy_recall" (PROFILE=smoke|cpu|paper)
	$(PY) -m tasks.train profile=$(PROFILE) $(ARGS)

tables: ## Regenerate every table/figure from results/runs/ (results/tables/<profile>/, results/figures/<profile>/)
	$(PY) -m tasks.common.tables $(if $(filter command line,$(origin PROFILE)),--profile $(PROFILE))

status: ## Which runs of a table are finished/running/failed/missing: make status TABLE=table1 [PROFILE=smoke]
	@$(if $(TABLE),,echo "error: make status needs TABLE=<table>, e.g. make status TABLE=table1 PROFILE=smoke" >&2; exit 2)
	@$(PY) -m tasks.common.status $(TABLE) --profile $(PROFILE) $(ARGS)

plan: ## The job list of a table and its expected wall per layout (estimates): make plan TABLE=table1 PROFILE=paper [GPUS=8 RUNS_PER_GPU=8 ARGS=--list]
	@$(if $(TABLE),,echo "error: make plan needs TABLE=<table>, e.g. make plan TABLE=table1 PROFILE=paper" >&2; exit 2)
	@$(PY) -m tasks.common.plan $(TABLE) --profile $(PROFILE) --launcher $(LAUNCHER) $(LAYOUT) $(ARGS)

reference: ## (developers) Your runs of TABLE/PROFILE enter the committed reference, each replacing its cell's run: make reference TABLE=table1 PROFILE=smoke
	@$(if $(TABLE),,echo "error: make reference needs TABLE=<table>, e.g. make reference TABLE=table1 PROFILE=smoke" >&2; exit 2)
	@$(PY) -m tasks.common.tables $(TABLE) --profile $(PROFILE) --publish

test-framework: ## Framework tests only (tests/framework)
	$(PY) -m pytest -q tests/framework $(XDIST)

reproduce-table1: ## Table 1 (MAD): sweep + table, PROFILE=smoke|cpu|paper (smoke: 24 runs, ~37 min)
reproduce-table2: ## Table 2 (WikiText-103): sweep + table, PROFILE=smoke|cpu|paper
reproduce-table3: ## Table 3 (ImageNet, DeiT-Tiny): sweep + table, PROFILE=smoke|cpu|paper
reproduce-table4: ## Table 4 (time series): sweep + table, PROFILE=smoke|cpu|paper
reproduce-ablation: ## Ablation (WikiText-103 + MAD): sweep + table, PROFILE=smoke|cpu|paper
reproduce-fig2: ## Figure 2 (RegBench): sweep + figure, PROFILE=smoke|cpu|paper
reproduce-fig3: ## Figure 3 (MQAR): sweep + figure, PROFILE=smoke|cpu|paper
reproduce-fig4: ## Figure 4 (OpenWebText2 curves): sweep + figure, PROFILE=smoke|cpu|paper
reproduce-toy: ## The framework's toy table (2 runs x 50 steps, CPU, ~1 min): sweep + table
# FORCE=1: train the finished runs again (skip_existing=false, resume=false). JOBS=N: N runs at
# once on CPU with cpu_count/N threads each (the caller's OMP_NUM_THREADS wins); PROFILE=cpu
# defaults to 2 (its tables are timed that way). LAUNCHER=local|ray|slurm, GPUS=G (local:
# default all visible), RUNS_PER_GPU=K (default per task: conf/estimates.yaml);
# docs/runs.md "Launchers".
JOBS ?= $(if $(filter cpu,$(PROFILE)),2,1)
LAUNCHER ?= local
LAYOUT = $(if $(GPUS),--gpus $(GPUS)) $(if $(RUNS_PER_GPU),--runs-per-gpu $(RUNS_PER_GPU))
# an unknown reproduce-<x>: the driver's one line naming the valid tables (conf/experiment/), exit 2
reproduce-%:
	@$(PY) -m tasks.common.reproduce $* --profile $(PROFILE) --jobs $(JOBS) --launcher $(LAUNCHER) $(LAYOUT) $(if $(FORCE),--force) $(ARGS)

.PHONY: rekey
rekey: ## After a change of what counts as run identity: rename finished runs to their new ids (ARGS=--dry-run)
	@$(PY) -m tasks.common.rekey $(ARGS)

.PHONY: carry
carry: ## After a task profile's step cap changed: move finished runs that stopped before it to their new ids (ARGS="--results-dir results/reference --dry-run")
	@$(PY) -m tasks.common.carry $(ARGS)

.PHONY: verdicts
verdicts: ## One verdict per claim of the paper (conf/claims.yaml) from the committed runs: results/reference/verdicts.{md,csv} (PROFILE=cpu default; ARGS="--root results": your runs)
	@$(PY) -m tasks.common.verdicts --profile $(if $(filter command line,$(origin PROFILE)),$(PROFILE),cpu) $(ARGS)

.PHONY: throughput
throughput: ## Runs/hour at K=1,2,4,8 runs per GPU on GPU 0 (a GPU machine; ~5 min): results/throughput/<table>_<profile>_<gpu>.csv [TABLE=table1 ARGS="--max-steps 1000"]
	PYTHONPATH=. $(GPU_PY) -m tasks.common.throughput --table $(or $(TABLE),table1) --profile $(if $(filter command line,$(origin PROFILE)),$(PROFILE),paper) $(ARGS)
