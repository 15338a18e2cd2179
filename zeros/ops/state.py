"""The recurrent ZeroS state: everything a causal row needs from the prefix (docs/spec.md §2).

Per (batch, head): t (tokens seen), the running max m, E = Σ e^{s_i - m}, P = Σ (s_i - c),
F = Σ e^{s_i - m} k_iᵀv_i, G = Σ (s_i - c) k_iᵀv_i, H = Σ k_iᵀv_i, with c a fixed shift
(the first logit of the sequence). The shift leaves every output unchanged (the first-order
term depends on s_i - s̄_t only) and keeps G, P small when logits are large: it is numerics,
not maths. Memory is O(H·d²) per sequence, independent of T.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class ZeroSState:
    t: int  # tokens consumed so far (same for every sequence in the batch)
    shift: torch.Tensor  # [B, H]     c, subtracted from every logit in P and G
    m: torch.Tensor  # [B, H]         running max of the logits
    E: torch.Tensor  # [B, H]         Σ e^{s_i - m}
    P: torch.Tensor  # [B, H]         Σ (s_i - c)
    F: torch.Tensor  # [B, H, d, d]   Σ e^{s_i - m} k_iᵀ v_i
    G: torch.Tensor  # [B, H, d, d]   Σ (s_i - c) k_iᵀ v_i
    H: torch.Tensor  # [B, H, d, d]   Σ k_iᵀ v_i

    def detach(self) -> "ZeroSState":
        """A copy cut from the autograd graph (e.g. between truncated-BPTT windows)."""
        return ZeroSState(self.t, *(getattr(self, f.name).detach() for f in fields(self)[1:]))

    def check(self, B: int, H: int, d: int) -> None:
        """Raise if this state cannot continue a batch of shape (B, ·, H, d)."""
        want = {"shift": (B, H), "m": (B, H), "E": (B, H), "P": (B, H),
                "F": (B, H, d, d), "G": (B, H, d, d), "H": (B, H, d, d)}
        for name, shape in want.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(f"ZeroSState.{name} has shape {got} but the inputs need {shape}: "
                                 "pass the state returned for this same batch and head layout")


def empty_state_like(s0: torch.Tensor, d: int) -> ZeroSState:
    """A state that has seen nothing, with the shift set from the first logit s0 [B, H]."""
    B, H = s0.shape
    z = s0.new_zeros(B, H)
    zz = s0.new_zeros(B, H, d, d)
    return ZeroSState(0, s0.detach().clone(), s0.detach().clone(), z, z.clone(), zz, zz.clone(),
                      zz.clone())
