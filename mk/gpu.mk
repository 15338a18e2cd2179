##@ GPU readiness (docs/kernels.md)
# GPU readiness without a GPU: the fake-CUDA dry-run, the sm_90 compile of what it
# records, and the one-call device check for a lent GPU. tests/gpu/, docs/kernels.md.
# GPU_PY: the device image has no .venv, so its system python runs the check there.
GPU_PY        ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
GPU_CHECK_OUT ?= results/gpu_check
GPU_WHEELS    ?= wheels/gpu
DRYRUN_OUT    ?= .dryrun
# pure-Python wheels the device image lacks, at the versions of constraints.txt (py3-none-any,
# so the python 3.12 image takes them); antlr4 ships an sdist only and is built here. Left out:
# wandb (platform wheels with a Go binary; the check logs nothing to W&B), datasets (pyarrow,
# xxhash: compiled; the check uses synthetic batches) and flash-linear-attention (needs
# transformers/tokenizers; only fla-core's fla.ops is imported).
GPU_WHEEL_PKGS = $(shell grep -E '^(hydra-core|omegaconf|hydra-submitit-launcher|submitit|cloudpickle|einops|fla-core|tabulate|tqdm)==' constraints.txt)
.PHONY: dry-run compile-sm90 gpu-check gpu-wheels

dry-run: ## Fake-CUDA dry-run: every experiment x swept mixer/shape, bf16-mixed and 32-true, fwd+bwd (CPU, CI)
	@mkdir -p $(DRYRUN_OUT)
	TRITON_INTERPRET=1 $(GPU_PY) tests/gpu/dryrun.py --launches $(DRYRUN_OUT)/launches.jsonl --results $(DRYRUN_OUT)/results.jsonl $(ARGS)

compile-sm90: dry-run ## Compile every Triton launch the dry-run recorded for sm_90 (bundled ptxas; slow on 2 cores)
	TRITON_INTERPRET=0 $(GPU_PY) tests/gpu/compile_recorded.py $(DRYRUN_OUT)/launches.jsonl --out $(DRYRUN_OUT)/compiled.jsonl --jobs 2 $(COMPILE_ARGS)

gpu-check: ## Device check on a lent GPU (<= 8 min on an H200): GPU_CHECK_OUT=results/gpu_check; CPU: runs what it can
	PYTHONPATH=. $(GPU_PY) tests/gpu/gpu_check.py --out $(GPU_CHECK_OUT) --wheels $(GPU_WHEELS)

gpu-wheels: ## Download the pure-Python wheels the GPU image lacks into wheels/gpu (GPU_WHEELS=; git-ignored; needs PyPI)
	@mkdir -p $(GPU_WHEELS)
	$(GPU_PY) -m pip download --no-deps --only-binary=:all: --python-version 3.12 --platform any --implementation py -d $(GPU_WHEELS) $(GPU_WHEEL_PKGS)
	$(GPU_PY) -m pip wheel --no-deps -w $(GPU_WHEELS) $(shell grep -E '^antlr4-python3-runtime==' constraints.txt)
	@ls $(GPU_WHEELS)
