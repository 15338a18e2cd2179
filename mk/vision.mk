# Vision (paper Table 3, issue 8): DeiT-Tiny with encoder ZeroS through timm. See docs/vision.md.
# `make reproduce-table3 PROFILE=smoke|paper` is the framework's generic target (mk/framework.mk):
# it runs conf/experiment/table3/*.yaml through `python -m tasks.train`. Paper data:
#   IMAGENET_DIR=/path/to/imagenet make reproduce-table3 PROFILE=paper   (train/ and val/ inside)
.PHONY: test-vision vision-table3

# Smoke on CPU: one intra-op thread next to the one data-loader worker fits 2 cores; with more
# threads than free cores PyTorch's CPU kernels spin (measured 10x slower per step under load).
ifeq ($(PROFILE),smoke)
reproduce-table3: export OMP_NUM_THREADS ?= 1
vision-table3: export OMP_NUM_THREADS ?= 1
endif

test-vision: ## Vision tests only (tests/vision)
	$(PY) -m pytest -q tests/vision

vision-table3: ## Table 3 without Hydra (DeiT-exact optimiser groups): PROFILE=smoke|paper, results/vision/
	$(PY) -m tasks.vision.table3 --profile $(PROFILE) $(if $(IMAGENET_DIR),--root $(IMAGENET_DIR)) $(ARGS)
