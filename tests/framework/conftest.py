"""Framework tests run on one thread with W&B offline (helpers: framework_helpers.py)."""
import os

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    torch.set_num_threads(1)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
