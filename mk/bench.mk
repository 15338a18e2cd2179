# Training-step benchmark per paper table: ZeroS vs softmax (SDPA) vs LinAttn.
.PHONY: bench-train

bench-train: ## Layer fwd+bwd and one training step at each table's paper and smoke shapes, ZeroS vs SDPA vs LinAttn (BENCH_TRAIN_ARGS="--threads 1 --max-batch 64")
	$(PY) -m zeros.bench_train --out results/bench/cpu_train.csv $(BENCH_TRAIN_ARGS)

.PHONY: compile-check
compile-check: ## Every table's model with the ZeroS / ZeroS-SM mixer under torch.compile(fullgraph=True): fails on a graph break (CPU, smoke sizes, ~4 min)
	$(PY) -m pytest -q tests/ops/test_compile_models.py -m "slow or not slow"
