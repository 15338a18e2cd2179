##@ Vision: Table 3 (docs/vision.md)
# Vision: Table 3 (DeiT-Tiny with encoder ZeroS through timm), run by the framework's
# `make reproduce-table3` (mk/framework.mk). Paper data: IMAGENET_DIR=/path (train/ and val/).
# See docs/vision.md.
.PHONY: test-vision

# Smoke on CPU: one intra-op thread next to the one data-loader worker fits 2 cores; with more
# threads than free cores PyTorch's CPU kernels spin (measured 10x slower per step under load).
ifeq ($(PROFILE),smoke)
reproduce-table3: export OMP_NUM_THREADS ?= 1
endif

test-vision: ## Vision tests only (tests/vision)
	$(PY) -m pytest -q tests/vision $(XDIST)
