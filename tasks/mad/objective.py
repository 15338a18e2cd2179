"""MAD's objective (conf/task/mad.yaml): cross-entropy over scored positions, MAD's macro accuracy."""
from __future__ import annotations

from tasks.common.objective import TokenClassification

from .settings import resolve_setting


class MADObjective(TokenClassification):
    """Cross-entropy over scored positions; metrics `acc` (macro, MAD's) and `acc_micro`."""

    def __init__(self, mad_task: str, setting: str = "baseline"):
        super().__init__(num_classes=resolve_setting(mad_task, setting)["vocab_size"])
