"""One run: build from a composed config, train, test, write the result JSON."""
from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import hydra
import hydra.errors
import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from zeros.compile import compile_or_eager, compile_setting
from zeros.mixers import MixerSpec

from .callbacks import Convergence, ResultWriter
from . import ddp_eval
from .claim import claim_run, global_rank
from .resume import (LosslessResume, MovableCheckpoint, ResumableCSVLogger, StepCheckpoint,
                     checkpoint_every)
from .errors import ConfigError, NotInProtocol
from . import interrupt
from .module import TaskModule, make_lr_lambda
from .provenance import for_run
from .state import RunState
from .store import git_info, is_finished, make_run_id, run_dir, table_name
from . import wandb_log
from .progress import ProgressLines, bar_callbacks, use_bar
from .scaled_clip import ScaledClipPrecision
from .validate import single_run

log = logging.getLogger("tasks.train")


def build(cfg: DictConfig, check_data: bool = True):
    """(datamodule, model, TaskModule) on CPU, nothing trained; raises ConfigError early (the
    config's own checks, validate.check_config, ran before: tasks.train's check_before_run).
    check_data=False skips the datamodule's own check() (data files may be absent in tests)."""
    sched = OmegaConf.to_container(cfg.scheduler, resolve=True)
    if sched.get("name") != "onecycle":  # a bad scheduler key fails here, not at fit start
        make_lr_lambda(sched, 1, float(cfg.optimizer.lr))
    dm = _instantiate(cfg.task.datamodule)
    if check_data:
        check_datamodule(dm)
    mixer = MixerSpec(cfg.mixer.name, OmegaConf.to_container(cfg.mixer.kwargs, resolve=True) or {})
    try:  # the layers validate their arguments with ValueError (e.g. rope_style=bogus)
        model = _instantiate(cfg.backbone, _partial_=True)(mixer=mixer)
    except ValueError as e:
        raise ConfigError(f"{e} (mixer.kwargs / backbone)") from None
    objective = _instantiate(cfg.task.objective)
    opt_cfg = OmegaConf.to_container(cfg.optimizer, resolve=True)
    decay = opt_cfg.pop("decay", "matrices")  # ours, not a torch.optim argument
    optimizer = hydra.utils.instantiate(opt_cfg, _convert_="all")
    module = TaskModule(model, objective, optimizer, OmegaConf.to_container(cfg.scheduler),
                        monitor=cfg.task.monitor, decay=decay)
    return dm, model, module


def check_datamodule(dm) -> None:
    """The datamodule's own check (its data present, or downloaded now): a ConfigError naming the
    fix. build() and check_data() both go through here."""
    if hasattr(dm, "check"):
        dm.check()


def check_data(cfg: DictConfig) -> None:
    """check_datamodule on the composed config's datamodule (no model built): reproduce.py runs it
    once per dataset before a sweep starts."""
    check_datamodule(_instantiate(cfg.task.datamodule))


def check_protocol_rows(cfg: DictConfig) -> None:
    """A recipe (conf/recipe/) may train only some rows (`protocol_rows`, e.g. Table 3's HGRN2
    image recipe: the ZeroS rows): the other sweep points are not in the protocol."""
    rows = cfg.get("protocol_rows")
    if rows is not None and cfg.mixer.name not in rows:
        raise NotInProtocol(f"this recipe trains only {', '.join(rows)} (protocol_rows), "
                            f"not mixer={cfg.mixer.name}")


def _instantiate(node, **kw):
    """hydra.utils.instantiate, but our own one-line errors come out unwrapped (Hydra wraps
    every constructor exception into a multi-line InstantiationException)."""
    try:
        return hydra.utils.instantiate(node, _convert_="all", **kw)
    except hydra.errors.InstantiationException as e:
        if isinstance(e.__cause__, (ConfigError, NotInProtocol)):
            raise e.__cause__ from None
        raise


def _loggers(cfg: DictConfig, rdir: Path, run_id: str, keep_csv: bool = False):
    # keep_csv (resuming): continue metrics.csv instead of Lightning deleting it
    csv = ResumableCSVLogger(save_dir=str(rdir), name="csv", version="", keep=keep_csv) \
        if cfg.logger.get("csv") else None
    # W&B: group/tags/id by wandb_log.py; the same id (wandb_log.wandb_id) + WandbLogger's own
    # resume="allow" (lightning 2.6.6): a resumed run continues its W&B run
    return [lg for lg in (csv, wandb_log.make_logger(cfg, rdir, run_id)) if lg is not None]


def _trainer_kwargs(cfg: DictConfig) -> dict:
    kw = OmegaConf.to_container(cfg.trainer, resolve=True)
    if isinstance(kw.get("strategy"), dict):
        kw["strategy"] = hydra.utils.instantiate(kw["strategy"])
    on_cpu = kw.get("accelerator") == "cpu" or (kw.get("accelerator") == "auto"
                                                 and not torch.cuda.is_available())
    if on_cpu:
        kw["precision"] = "32-true"  # bf16 autocast is a GPU setting; CPU runs are fp32
    # an experiment's `clip_scaled_grads: true` (absent: off): LJC-FVNR's AMP update rule
    if cfg.get("clip_scaled_grads"):  # on CPU and GPU alike (tasks/common/scaled_clip.py)
        kw.pop("precision", None)
        kw["plugins"] = [ScaledClipPrecision("cpu" if on_cpu else "cuda")]
    kw["enable_progress_bar"] = use_bar(kw.get("enable_progress_bar"))  # null: on a terminal
    return kw  # None is meaningful (check_val_every_n_epoch=None: validate by steps)


def run(cfg: DictConfig):
    from lightning.pytorch.utilities.exceptions import SIGTERMException
    interrupt.raise_from_now()  # a stop from here on names the run's checkpoint (_stopped)
    try:
        with RunState() as state:  # <run dir>/state.json: running / failed / finished (make status)
            try:
                return _run(cfg, state)
            except SystemExit as e:  # Lightning ends a graceful Ctrl-C with sys.exit(1): say so
                if isinstance(e.__context__, KeyboardInterrupt):
                    raise KeyboardInterrupt("interrupted (Ctrl-C)") from None
                raise
    except (SIGTERMException, interrupt.Terminated):  # Lightning's SystemExit has no code: not exit 0
        raise _stopped(cfg, "terminated (SIGTERM)", 143) from None
    except (KeyboardInterrupt, interrupt.Interrupted):
        raise _stopped(cfg, "interrupted (Ctrl-C)", 130) from None


def _stopped(cfg: DictConfig, how: str, code: int) -> SystemExit:
    """The one line a stopped run prints and its exit: what rerunning the command does."""
    print(f"error: {how}: {stop_hint(cfg)}", file=sys.stderr)
    return SystemExit(code)


def stop_hint(cfg: DictConfig) -> str:
    """Where the same command continues from (resume=true, the default), or that it starts again
    (resume=false, as FORCE=1 passes) and how to continue instead; true of the files on disk."""
    last = run_dir(cfg, make_run_id(cfg)) / "checkpoints" / "last.ckpt"
    if not last.is_file():
        return "no checkpoint yet: rerunning the same command starts the run again"
    if cfg.resume:
        return f"rerun the same command to resume from {last}"
    return (f"rerun without resume=false (make: without FORCE=1) to resume from {last}; "
            "the same command starts again from step 0")


def _run(cfg: DictConfig, state: RunState):
    run_id = make_run_id(cfg)
    provenance, out_json = for_run(cfg, run_id)  # an ad-hoc run of a table goes to runs/adhoc/
    if cfg.skip_existing and is_finished(out_json):
        print(f"skip (finished): {out_json}")  # once (the driver counts this line)
        return None
    if not claim_run(cfg, run_id, out_json, state):  # claim.py: one trainer per run id, any host
        return None
    L.seed_everything(int(cfg.seed), workers=True, verbose=False)  # before build: seeds the init
    try:
        check_protocol_rows(cfg)
        dm, model, module = build(cfg)
    except NotInProtocol as e:
        if single_run():  # a sweep point skips; a single run typed with it is a one-line error
            raise ConfigError(f"{e}: nothing to train for this single run") from None
        print(f"skip (not in the protocol): {e}")
        return None
    rdir = run_dir(cfg, run_id)
    ckpt_dir = rdir / "checkpoints"
    last = ckpt_dir / "last.ckpt"
    if not cfg.resume:  # asked for (resume=false / FORCE=1): start fresh
        if last.exists():
            log.info("resume=false: starting from step 0; the earlier attempt's checkpoints and "
                     "curve in %s are removed", rdir)
        for old in (ckpt_dir, rdir / "csv"):  # (the result JSON is only replaced at the end)
            if old.exists():
                shutil.rmtree(old)
    rdir.mkdir(parents=True, exist_ok=True)
    state.start(rdir)
    t = cfg.task
    report = str(t.get("report") or "best")  # which snapshot (and weights) the run reports
    writer = ResultWriter(out_json, _meta(cfg, run_id), t.monitor, t.monitor_mode, report,
                          OmegaConf.to_container(t.extra_metrics, resolve=True)
                          if t.get("extra_metrics") else None)
    callbacks = [writer, MovableCheckpoint(
        dirpath=str(ckpt_dir), filename="best", monitor=t.monitor, mode=t.monitor_mode,
        save_last=True, save_top_k=1, enable_version_counter=False)]  # last.ckpt: StepCheckpoint's too
    resumer = LosslessResume(int(cfg.seed))  # data position + RNG in the checkpoint
    resumer.wrap(dm)
    ddp_eval.wrap(dm)  # under DDP: every val/test example scored once, in single-process batches
    callbacks.append(resumer)
    every = checkpoint_every(cfg)  # last.ckpt every N steps too (None: off)
    if every:
        callbacks.append(StepCheckpoint(last, every))
    resuming = bool(cfg.resume) and last.exists()
    bar = use_bar(cfg.trainer.get("enable_progress_bar"))
    # lines where no bar, from rank 0 only (under DDP every rank runs this code)
    progress = ProgressLines(run_id, rdir, t.monitor, lines=not bar and global_rank() == 0)
    callbacks.append(progress)
    callbacks += bar_callbacks(bar)
    # the convergence rule: stop_at / plateau (task.converge, task.patience) / cap; stop_monitor:
    # mad-lab picks its checkpoint by loss but stops on accuracy >= 0.999
    converge = Convergence.from_task(t)
    callbacks.append(converge)
    trainer = L.Trainer(**_trainer_kwargs(cfg), callbacks=callbacks,
                        logger=_loggers(cfg, rdir, run_id, keep_csv=resuming) or False,
                        default_root_dir=str(rdir))
    backend = compile_setting(cfg.get("compile"))
    if backend:  # CPU and GPU; a compile failure warns once and runs eager (zeros/compile.py)
        compile_or_eager(module.model, backend)
    ckpt = str(last) if resuming else None
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt)
    if not writer.history or writer.history[-1]["step"] != trainer.global_step:
        trainer.validate(module, datamodule=dm, verbose=False)  # fit stopped between validations
    ended = converge.summary(writer.history)  # before test: loading best.ckpt rewinds callbacks
    if t.get("run_test", True):
        # report=last: the weights in memory are the last ones (also after a final validate)
        best = callbacks[1].best_model_path if report == "best" else None
        writer.frozen = True  # loading best.ckpt must not restore the callback's older state
        trainer.test(module, datamodule=dm, ckpt_path=best or None, verbose=False)
    extra = {"device": _device_name(trainer), "precision": str(trainer.precision),
             "run_dir": str(rdir), "provenance": provenance, **git_info(), **ended}
    best = None
    if trainer.is_global_zero:  # one JSON per run, written by rank 0 only
        payload = writer.write(trainer, model, OmegaConf.to_container(cfg, resolve=True), extra)
        best = payload["metrics"]["reported"].get(t.monitor)  # the sweeper's objective
        progress.finished(payload)
        print(f"result: {out_json}")
    wandb_log.finish(trainer, payload if trainer.is_global_zero else None)  # summary + close
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
