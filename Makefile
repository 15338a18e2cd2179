# ZeroS reproduction suite. `make help` lists every target with its one-line description.
# Task-specific targets live in mk/*.mk (one fragment per area) and are included below.
PY      ?= .venv/bin/python
PIP     ?= .venv/bin/pip
PROFILE ?= smoke
# pytest-xdist workers for `make test` / `make test-slow` (2: the CI machine's cores; 0 = one process);
# worksteal: an idle worker takes queued tests from a busy one (the suite's tests last 0.1-60 s)
TEST_JOBS ?= 2
# -n only where pytest-xdist is installed (an older .venv: one line, then one process)
XDIST = $$($(PY) -c 'import xdist' 2>/dev/null && echo "-n $(TEST_JOBS) --dist worksteal" || echo "pytest-xdist missing (make install): one process" >&2)
export PYTHONHASHSEED = 0

.DEFAULT_GOAL := help
.PHONY: help install test test-slow bench

##@ Set-up and tests
# help: each file's `##@ Area` line heads its targets (`target: ## text`), in the files' order
help: ## Show this help, grouped by area
	@awk 'BEGIN {FS = ":.*?## "} /^##@ / {printf "\n%s\n", substr($$0, 5); next} \
		/^[a-zA-Z0-9_.-]+:.*?## / {printf "  \033[36m%-22s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: ## Create .venv with the tested pins (constraints.txt) and the whole suite ([suite] extra): ~3.5 min, 6.6 GB (torch with CUDA wheels)
	python3 -m venv .venv
	$(PIP) install --upgrade "pip>=24"
	$(PIP) install -c constraints.txt -e '.[suite,test,fla,ray]'

test: ## Run the default test suite (CPU, ~7 min on 2 cores in 2 workers: TEST_JOBS=N; no slow or gpu tests)
	$(PY) -m pytest -q $(XDIST)

test-slow: ## Run the slow tests too (long CPU runs; gpu tests still need CUDA)
	$(PY) -m pytest -q -m "not gpu" $(XDIST)

##@ Benchmarks
bench: ## CPU benchmark of the operator (chunk/naive/SDPA/materialised prefix); BENCH_ARGS="--threads 1" on a busy machine
	$(PY) -m zeros.bench --out results/bench/cpu_operator.csv $(BENCH_ARGS)

-include mk/*.mk
