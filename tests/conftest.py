"""Session-wide test set-up, loaded before any test module is collected.

Without a GPU the Triton kernels can only run under the interpreter, and Triton decides that
when a kernel is defined: TRITON_INTERPRET must be set before ANY module (lightning,
torchmetrics, fla, kernels) imports triton, so it is set here rather than in tests/kernels.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
