"""One run: build from a composed config, train, test, write the result JSON."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import hydra
import hydra.errors
import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from zeros.mixers import MixerSpec

from .callbacks import ResultWriter
from .errors import ConfigError, NotInProtocol
from .module import TaskModule
from .runinfo import git_info, make_run_id, result_path, run_dir, table_name
from .validate import check_config

log = logging.getLogger("tasks.train")


def build(cfg: DictConfig, check_data: bool = True):
    """(datamodule, model, TaskModule) on CPU, nothing trained; raises ConfigError early.
    check_data=False skips the datamodule's own check() (data files may be absent in tests)."""
    check_config(cfg)
    dm = _instantiate(cfg.task.datamodule)
    if check_data and hasattr(dm, "check"):
        dm.check()
    mixer = MixerSpec(cfg.mixer.name, OmegaConf.to_container(cfg.mixer.kwargs, resolve=True) or {})
    model = _instantiate(cfg.backbone, _partial_=True)(mixer=mixer)
    objective = _instantiate(cfg.task.objective)
    opt_cfg = OmegaConf.to_container(cfg.optimizer, resolve=True)
    decay = opt_cfg.pop("decay", "matrices")  # ours, not a torch.optim argument
    optimizer = hydra.utils.instantiate(opt_cfg, _convert_="all")
    module = TaskModule(model, objective, optimizer, OmegaConf.to_container(cfg.scheduler),
                        monitor=cfg.task.monitor, decay=decay)
    return dm, model, module


def _instantiate(node, **kw):
    """hydra.utils.instantiate, but our own one-line errors come out unwrapped (Hydra wraps
    every constructor exception into a multi-line InstantiationException)."""
    try:
        return hydra.utils.instantiate(node, _convert_="all", **kw)
    except hydra.errors.InstantiationException as e:
        if isinstance(e.__cause__, (ConfigError, NotInProtocol)):
            raise e.__cause__ from None
        raise


def _loggers(cfg: DictConfig, rdir: Path, run_id: str):
    out = []
    if cfg.logger.get("csv"):
        out.append(L.pytorch.loggers.CSVLogger(save_dir=str(rdir), name="csv", version=""))
    if cfg.logger.get("wandb") and cfg.wandb.mode != "disabled":
        import hashlib
        import os
        os.environ["WANDB_MODE"] = str(cfg.wandb.mode)
        m = cfg.meta
        tags = [f"table:{table_name(cfg)}", f"task:{cfg.task.name}", f"mixer:{cfg.mixer.name}",
                f"setting:{m.setting}", f"profile:{cfg.profile.name}", f"row:{m.row}"]
        out.append(L.pytorch.loggers.WandbLogger(
            project=cfg.wandb.project, entity=cfg.wandb.entity, group=table_name(cfg),
            name=run_id, id=hashlib.sha1(run_id.encode()).hexdigest()[:16], tags=tags,
            save_dir=str(rdir), offline=cfg.wandb.mode == "offline", resume="allow",
            config=OmegaConf.to_container(cfg, resolve=True)))
    return out


def _trainer_kwargs(cfg: DictConfig) -> dict:
    kw = OmegaConf.to_container(cfg.trainer, resolve=True)
    if isinstance(kw.get("strategy"), dict):
        kw["strategy"] = hydra.utils.instantiate(kw["strategy"])
    on_cpu = kw.get("accelerator") == "cpu" or (kw.get("accelerator") == "auto"
                                                 and not torch.cuda.is_available())
    if on_cpu:
        kw["precision"] = "32-true"  # bf16 autocast is a GPU setting; CPU runs are fp32
    return kw  # None is meaningful (check_val_every_n_epoch=None: validate by steps)


def run(cfg: DictConfig):
    run_id = make_run_id(cfg)
    out_json = result_path(cfg, run_id)
    if cfg.skip_existing and out_json.exists():
        log.info("skip %s: %s exists", run_id, out_json)
        print(f"skip (finished): {out_json}")
        return None
    try:
        dm, model, module = build(cfg)
    except NotInProtocol as e:
        print(f"skip (not in the protocol): {e}")
        return None
    rdir = run_dir(cfg, run_id)
    ckpt_dir = rdir / "checkpoints"
    last = ckpt_dir / "last.ckpt"
    if not cfg.resume and ckpt_dir.exists():
        shutil.rmtree(ckpt_dir)  # an unfinished earlier attempt of this same run: start fresh
    rdir.mkdir(parents=True, exist_ok=True)
    L.seed_everything(int(cfg.seed), workers=True, verbose=False)
    t = cfg.task
    writer = ResultWriter(out_json, _meta(cfg, run_id), t.monitor, t.monitor_mode)
    callbacks = [writer, L.pytorch.callbacks.ModelCheckpoint(
        dirpath=str(ckpt_dir), filename="best", monitor=t.monitor, mode=t.monitor_mode,
        save_last=True, save_top_k=1)]
    if t.get("stop_at") is not None or t.get("patience") is not None:
        callbacks.append(L.pytorch.callbacks.EarlyStopping(
            monitor=t.monitor, mode=t.monitor_mode, stopping_threshold=t.get("stop_at"),
            patience=int(t.get("patience") or 10**9), check_on_train_epoch_end=False))
    trainer = L.Trainer(**_trainer_kwargs(cfg), callbacks=callbacks,
                        logger=_loggers(cfg, rdir, run_id) or False,
                        default_root_dir=str(rdir))
    if cfg.get("compile") and torch.cuda.is_available():
        module.model = torch.compile(module.model)
    ckpt = str(last) if cfg.resume and last.exists() else None
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt)
    if not writer.history or writer.history[-1]["step"] != trainer.global_step:
        trainer.validate(module, datamodule=dm, verbose=False)  # fit stopped between validations
    if t.get("run_test", True):
        best = callbacks[1].best_model_path
        writer.frozen = True  # loading best.ckpt must not restore the callback's older state
        trainer.test(module, datamodule=dm, ckpt_path=best or None, verbose=False)
    extra = {"device": _device_name(trainer), "precision": str(trainer.precision),
             "run_dir": str(rdir), **git_info()}
    best = None
    if trainer.is_global_zero:  # one JSON per run, written by rank 0 only
        payload = writer.write(trainer, model, OmegaConf.to_container(cfg, resolve=True), extra)
        best = payload["metrics"]["best"].get(t.monitor)
        print(f"result: {out_json}")
    _finish_wandb(trainer)
    return best


def _meta(cfg: DictConfig, run_id: str) -> dict:
    return {"run_id": run_id, "table": table_name(cfg), "row": str(cfg.meta.row),
            "column": str(cfg.meta.column), "setting": str(cfg.meta.setting),
            "task": cfg.task.name, "mixer": cfg.mixer.name, "profile": cfg.profile.name,
            "seed": int(cfg.seed), "lr": float(cfg.optimizer.lr),
            "weight_decay": float(cfg.optimizer.weight_decay)}


def _device_name(trainer) -> str:
    root = trainer.strategy.root_device
    if root.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(root)} x{trainer.world_size}"
    return f"{root.type} x{trainer.world_size}"


def _finish_wandb(trainer) -> None:
    for lg in trainer.loggers:
        if isinstance(lg, L.pytorch.loggers.WandbLogger):
            import wandb
            wandb.finish()
