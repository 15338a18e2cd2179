"""tests/gpu: the fake-CUDA dry-run (CPU, default suite) and the CUDA-only checks (marked gpu).
The helpers (fake_cuda, paper_models, dryrun) are scripts of this folder: put it on sys.path."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
