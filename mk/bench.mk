# Training-step benchmark per paper table: ZeroS vs softmax (SDPA) vs LinAttn.
.PHONY: bench-train

bench-train: ## Layer fwd+bwd and one training step at each table's paper and smoke shapes, ZeroS vs SDPA vs LinAttn (BENCH_TRAIN_ARGS="--threads 1 --max-batch 64")
	$(PY) -m tasks.bench_train --out results/bench/cpu_train.csv $(BENCH_TRAIN_ARGS)
