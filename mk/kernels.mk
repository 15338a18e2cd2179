##@ Triton kernels (docs/kernels.md)
# Triton kernels for the ZeroS operator (kernels/, tests/kernels/, docs/kernels.md).
.PHONY: test-kernels test-kernels-gpu bench-gpu

test-kernels: ## Kernel tests on CPU under the Triton interpreter (forward, 7 gradients, decode)
	$(PY) -m pytest -q tests/kernels $(XDIST)

test-kernels-gpu: ## Kernel tests incl. slow and CUDA-only (bf16/fp16) ones; needs a GPU for the latter
	$(PY) -m pytest -q tests/kernels -m "slow or gpu or not slow"

bench-gpu: ## GPU benchmark: ZeroS kernels vs fla chunk_simple_gla/linear_attn and SDPA flash (CUDA only)
	$(PY) -m kernels.bench_gpu --out results/bench/gpu_kernels.csv --plot results/bench/gpu_kernels.png
