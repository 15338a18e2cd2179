"""ZeroS: zero-sum linear attention. The operator lives in `zeros.ops`, the layers here."""
from .layer import ZeroSAttention, ZeroSLayerState, ZeroSSMAttention, ZeroSSMLayerState
from .ops import zeros_attention, zeros_sm_attention, zeros_step

__all__ = ["ZeroSAttention", "ZeroSLayerState", "ZeroSSMAttention", "ZeroSSMLayerState",
           "zeros_attention", "zeros_sm_attention", "zeros_step"]
