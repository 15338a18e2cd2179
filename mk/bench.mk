# Training-step benchmark per paper table: ZeroS vs softmax (SDPA) vs LinAttn.
.PHONY: bench-train bench-compiled

bench-train: ## Layer fwd+bwd and one training step at each table's paper and smoke shapes, ZeroS vs SDPA vs LinAttn (BENCH_TRAIN_ARGS="--threads 1 --max-batch 64")
	$(PY) -m tasks.bench_train --out results/bench/cpu_train.csv $(BENCH_TRAIN_ARGS)

# compiled ZeroS vs compiled softmax (SDPA) and vs eager, the models of table2, table3, table4, fig2, fig4
# and fig3 at smoke sizes (inductor compiles each model once: ~1-3 min per model on 2 cores)
bench-compiled: ## Compiled vs eager ZeroS / softmax, layer + training step, smoke-size table models (CPU, 1 thread, batch <= 8): results/bench/cpu_train_compiled_smoke.csv
	$(PY) -m tasks.bench_train --tables table2 table3 table4 fig2 fig4 fig3 --profiles smoke --mixers zeros softmax zeros_compiled softmax_compiled --threads 1 --max-batch 8 --no-peak --reps 5 --out results/bench/cpu_train_compiled_smoke.csv

.PHONY: compile-check
compile-check: ## Every table's model with the ZeroS / ZeroS-SM mixer under torch.compile(fullgraph=True): fails on a graph break (CPU, smoke sizes, ~4 min)
	$(PY) -m pytest -q tests/ops/test_compile_models.py -m "slow or not slow"
