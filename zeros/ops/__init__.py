"""The ZeroS operator: `zeros_attention`, `zeros_step`, `zeros_sm_attention` (see api.py)."""
from .api import (BACKENDS, SM_BACKENDS, set_unit_norm_check, zeros_attention, zeros_prefill,
                  zeros_sm_attention, zeros_step)
from .chunk import chunk_zeros
from .linear import chunk_linear_attn
from .naive import naive_zeros, naive_zeros_sm, zeros_weights
from .state import ZeroSState

__all__ = ["BACKENDS", "SM_BACKENDS", "ZeroSState", "chunk_linear_attn", "chunk_zeros",
           "naive_zeros", "naive_zeros_sm", "set_unit_norm_check", "zeros_attention",
           "zeros_prefill", "zeros_sm_attention", "zeros_step", "zeros_weights"]
