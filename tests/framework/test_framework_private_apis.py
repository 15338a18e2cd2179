"""The private attributes of other libraries that the code still uses, where no public API does
the job (docs/runs.md, "Private attributes of other libraries"). Each is used in one place,
with a comment naming the version it was checked against; a release that renames or drops one
fails here, naming the file to update, instead of a run failing (or silently changing) later."""
from __future__ import annotations

import importlib

import pytest


def _need(obj, name: str, user: str) -> None:
    assert hasattr(obj, name), (f"{getattr(obj, '__name__', type(obj).__name__)}.{name} is gone "
                                f"(a private API): update {user}")


def test_lightning_private_apis_still_exist(tmp_path):
    from lightning.pytorch.callbacks import RichProgressBar
    from lightning.pytorch.loggers import CSVLogger, WandbLogger
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter
    from lightning.pytorch.plugins.precision import Precision
    _need(RichProgressBar, "_get_train_description", "tasks/common/progress.py (_StepBudgetBar)")
    _need(ExperimentWriter, "_check_log_dir_exists", "tasks/common/resume.py (_KeepingWriter)")
    _need(CSVLogger(save_dir=str(tmp_path)), "_experiment", "tasks/common/resume.py")
    _need(Precision, "_after_closure", "tasks/common/scaled_clip.py")
    init = WandbLogger(save_dir=str(tmp_path), offline=True)._wandb_init  # tasks/common/wandb_log.py
    # the key wandb_log drops (wandb warns on anonymous=None); gone: delete the workaround
    assert "anonymous" in init, "WandbLogger no longer passes anonymous: drop wandb_log's pop"
    # runner._loggers relies on WandbLogger's own resume="allow" (a resumed run continues its run)
    assert init.get("resume") == "allow"


def test_torch_private_apis_still_exist():
    import torch
    _need(torch.nn.Linear(2, 2), "_compiled_call_impl", "zeros/compile.py")
    _need(torch.nn.Module, "_call_impl", "zeros/compile.py")
    for module, name in (("torch._dynamo.exc", "TorchDynamoException"),
                         ("torch._inductor.exc", "InductorError")):
        _need(importlib.import_module(module), name, "zeros/compile.py (_compile_errors)")
    _need(torch.compile(torch.nn.Linear(2, 2)), "_orig_mod", "tasks/mqar/objective.py")


def test_triton_private_apis_still_exist():
    tl = pytest.importorskip("triton.language")
    for name in ("_sum_combine", "_elementwise_max"):
        _need(tl.standard, name, "kernels/common.py")
