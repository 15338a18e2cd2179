"""Standalone LM training loop (one mixer, one config) -> metrics.json, history.csv, model.pt.

Protocol knobs (PROTOCOLS.md, WikiText-103/HGRN2): blocks of train.seq_len tokens,
train.tokens_per_update tokens per update through gradient accumulation of micro batches,
Adam(W) with decoupled weight decay (fairseq's Adam decays weights this way), inverse-sqrt or
cosine schedule with linear warmup from warmup_init_lr, gradient clipping, then perplexity on
non-overlapping blocks of valid and test (tasks.lm.evaluate).
"""
from __future__ import annotations

import csv
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from .data import build_token_cache, train_batches
from .errors import LMDataError
from .evaluate import evaluate_blocks
from .model import (LanguageModel, LMConfig, count_parameters, lm_config_dict,
                    lm_mixer_kwargs)
from .tokenizer import tokenizer_from_cfg


def lr_at(step: int, t) -> float:
    """Learning rate for update `step` (1-based). t: the train config."""
    warm, peak = int(t.warmup), float(t.lr)
    init = float(t.get("warmup_init_lr", 0.0) or 0.0)
    if warm > 0 and step <= warm:
        return init + (peak - init) * step / warm
    if t.schedule == "inverse_sqrt":  # fairseq: lr · sqrt(warmup / step) after warmup
        return peak * math.sqrt(max(warm, 1) / step)
    if t.schedule == "cosine":
        frac = (step - warm) / max(1, int(t.max_updates) - warm)
        lo = float(t.get("min_lr", 0.0) or 0.0)
        return lo + 0.5 * (peak - lo) * (1 + math.cos(math.pi * min(frac, 1.0)))
    if t.schedule == "constant":
        return peak
    raise ValueError(f"train.schedule={t.schedule!r}: use inverse_sqrt, cosine or constant")


def build_model(cfg, vocab_from_tokenizer: int, mixer: str) -> LanguageModel:
    m = cfg.model
    vocab = int(m.vocab_size or vocab_from_tokenizer)
    if vocab < vocab_from_tokenizer:
        raise ValueError(f"model.vocab_size={vocab} is smaller than the tokenizer's "
                         f"{vocab_from_tokenizer}: raise it or set it to null")
    kwargs = lm_mixer_kwargs(mixer, cfg.get("mixer_kwargs", {}).get(mixer, {}) or {},
                             m.positions)
    lm_cfg = LMConfig(vocab_size=vocab, n_layers=m.n_layers, d_model=m.d_model,
                      n_heads=m.n_heads, d_ff=m.d_ff, max_len=m.max_len, positions=m.positions,
                      activation=m.activation, dropout=m.dropout,
                      scale_embedding=m.scale_embedding, mixer=mixer, mixer_kwargs=kwargs)
    return LanguageModel(lm_cfg)


def _device(t):
    if t.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return t.device


def train_one(cfg, mixer: str, out_dir: Path, log=print) -> dict:
    """Train `mixer` under `cfg` (OmegaConf) and evaluate; writes into out_dir."""
    t = cfg.train
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if t.get("threads"):
        torch.set_num_threads(int(t.threads))
    torch.manual_seed(int(t.seed))
    tokenizer = tokenizer_from_cfg(cfg.tokenizer)
    cache = build_token_cache(cfg.data, tokenizer)
    train_tok = cache.tokens("train")
    device = _device(t)
    amp = torch.bfloat16 if (t.precision == "bf16" and device.startswith("cuda")) else None
    model = build_model(cfg, cache.vocab_size, mixer).to(device)
    n_params = count_parameters(model)
    per_micro = int(t.micro_batch) * int(t.seq_len)
    accum = int(t.tokens_per_update) // per_micro
    if accum < 1 or accum * per_micro != int(t.tokens_per_update):
        raise ValueError(f"train.tokens_per_update={t.tokens_per_update} is not a multiple of "
                         f"micro_batch·seq_len={per_micro}: change train.micro_batch")
    opt = torch.optim.AdamW(model.parameters(), lr=float(t.lr), betas=tuple(t.betas),
                            eps=float(t.eps), weight_decay=float(t.weight_decay))
    batches = train_batches(train_tok, int(t.seq_len), int(t.micro_batch), cache.eos_id,
                            seed=int(t.seed))
    log(f"[lm] {mixer}: {n_params:,} params, {len(train_tok):,} train tokens, {accum} micro "
        f"batches of {per_micro} tokens per update, device {device}")
    ev = dict(block=int(cfg.eval.block), batch_size=int(cfg.eval.batch_size),
              eos_id=cache.eos_id, device=device, autocast_dtype=amp)
    history, start, best_val = [], time.time(), float("inf")
    cpu0 = time.process_time()  # CPU seconds too: wall time on shared cores says little
    run_loss, run_n = 0.0, 0
    model.train()
    for step in range(1, int(t.max_updates) + 1):
        lr = lr_at(step, t)
        for g in opt.param_groups:
            g["lr"] = lr
        step_loss = 0.0
        for _ in range(accum):
            x, y = (b.to(device) for b in next(batches))  # [B, T] each
            with torch.autocast(device_type=device.split(":")[0], dtype=amp,
                                enabled=amp is not None):
                logits = model(x)  # [B, T, V]
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
            (loss / accum).backward()
            step_loss += loss.item() / accum
        if t.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), float(t.clip))
        opt.step()
        opt.zero_grad(set_to_none=True)
        if not math.isfinite(step_loss):
            raise FloatingPointError(f"{mixer}: training loss is {step_loss} at update {step}")
        run_loss, run_n = run_loss + step_loss, run_n + 1
        last = step == int(t.max_updates)
        if step % int(t.eval_every) == 0 or last:
            val = evaluate_blocks(model, cache.tokens("valid"),
                                  max_blocks=None if last else t.get("eval_max_blocks"), **ev)
            row = {"step": step, "train_loss": run_loss / run_n, "val_loss": val["loss"],
                   "lr": lr, "tokens": step * int(t.tokens_per_update),
                   "elapsed_s": round(time.time() - start, 1)}
            history.append(row)
            run_loss, run_n = 0.0, 0
            log(f"[lm] {mixer} step {step}: train {row['train_loss']:.4f} val {val['loss']:.4f} "
                f"lr {lr:.2e} ({row['elapsed_s']}s)")
            if val["loss"] < best_val:  # fairseq evaluates checkpoint_best (lowest val loss)
                best_val = val["loss"]
                _save(model, tokenizer, cache, out_dir / "model.pt", step)
    train_s = time.time() - start
    model.load_state_dict(torch.load(out_dir / "model.pt", map_location=device)["state_dict"])
    final = {split: evaluate_blocks(model, cache.tokens(split), **ev)
             for split in ("valid", "test") if cache.has(split)}
    metrics = {"mixer": mixer, "params": n_params, "train_s": round(train_s, 1),
               "wall_s": round(time.time() - start, 1),
               "cpu_s": round(time.process_time() - cpu0, 1), "updates": int(t.max_updates),
               "tokenizer": tokenizer.describe(), "cache": str(cache.root),
               **{f"{s}_{k}": v for s, r in final.items() for k, v in r.items()}}
    with open(out_dir / "history.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(history[0]))
        w.writeheader()
        w.writerows(history)
    _write_json(out_dir / "metrics.json", metrics)
    log(f"[lm] {mixer}: " + ", ".join(f"{s} ppl {r['ppl']:.2f} ({r['tokens']:,} tokens)"
                                      for s, r in final.items()) + f", {metrics['wall_s']}s")
    return metrics


def _save(model, tokenizer, cache, path: Path, step: int) -> None:
    torch.save({"lm_config": lm_config_dict(model.cfg), "state_dict": model.state_dict(),
                "tokenizer": tokenizer.describe(), "cache": str(cache.root), "step": step}, path)


def _write_json(path: Path, obj) -> None:
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2)
    os.replace(tmp, path)


__all__ = ["LMDataError", "build_model", "lr_at", "train_one"]
