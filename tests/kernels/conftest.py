"""Kernel tests run on CPU under the Triton interpreter.

TRITON_INTERPRET must be set before any `@triton.jit` kernel is defined (Triton decides at
decoration time), so it is set here, at conftest import, before the test modules import
`kernels`. On a machine with CUDA it is left alone so that the gpu-marked tests run the compiled
kernels. Side effect: any Triton kernel defined later in the same pytest process (e.g. fla's) is
interpreted too when there is no GPU.
"""
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

sys.path.insert(0, os.path.dirname(__file__))
