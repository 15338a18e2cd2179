"""Text sources -> GPT-2/byte token cache (uint16 memmap + manifest) -> LM blocks.

Sources (config `data`):
  source: local  path=DIR, files={train: train.txt, valid: valid.txt, test: test.txt}
  source: hf     hf={id, config, splits={train: train, valid: validation, test: test},
                 text_field, streaming}: e.g. WikiText-103 raw or OpenWebText2 (streaming)
  holdout={split: valid, from: train, fraction | units}: carve a split off another one
  max_tokens={train: N, ...}: token budget per split (OpenWebText2 is far larger than needed)
Each text unit (a line, or a document) is stripped and followed by eos (fairseq appends </s> to
every line; GPT-2 pipelines put <|endoftext|> after every document).
Blocks (fairseq `--tokens-per-sample 512`, break mode none): the stream is cut into
non-overlapping blocks of targets; a block's input is the token before each target (the
stream's first target is predicted from eos), so every token is a target exactly once.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
from pathlib import Path

import lightning as L
import numpy as np
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from tasks.common.errors import ConfigError, short_reason
from tasks.common.objective import IGNORE, random_tokens

from .tokenizer import tokenizer_from_cfg

SPLITS = ("train", "valid", "test")
MANIFEST = "manifest.json"
_ENCODE_BATCH = 2048


def _get(cfg, key, default=None):
    if cfg is None:
        return default
    val = cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
    return default if val is None else val


def _plain(cfg):
    try:
        from omegaconf import OmegaConf
        if OmegaConf.is_config(cfg):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:
        pass
    return cfg


# ----------------------------------------------------------------------------- text sources
def _local_lines(data_cfg, split: str) -> list[str]:
    path = _get(data_cfg, "path")
    if not path:
        raise ConfigError("data.source=local needs data.path=DIR holding the text files "
                          "(e.g. data.path=/data/wikitext-103 with train.txt/valid.txt/test.txt)")
    name = _get(_get(data_cfg, "files", {}), split)
    if not name:
        raise ConfigError(f"data.files.{split} is not set for data.path={path}: name the text "
                          f"file of the {split} split (or carve it with data.holdout)")
    f = Path(os.path.expanduser(str(path))) / name
    if not f.is_file():
        raise ConfigError(f"missing {split} text file {f}: put it there or set "
                          f"data.path / data.files.{split} to the file you have")
    with open(f, encoding="utf-8") as fh:
        return [line.strip() for line in fh]


def _hf_units(data_cfg, split: str):
    hf = _get(data_cfg, "hf", {})
    ds_id, ds_conf = _get(hf, "id"), _get(hf, "config")
    hf_split = _get(_get(hf, "splits", {}), split)
    if not ds_id or not hf_split:
        raise ConfigError(f"data.hf.id and data.hf.splits.{split} must name the dataset and its "
                          f"{split} split (e.g. Salesforce/wikitext, validation)")
    streaming = bool(_get(hf, "streaming", False))
    try:
        from datasets import load_dataset
        ds = load_dataset(ds_id, ds_conf, split=hf_split, streaming=streaming)
    except Exception as exc:  # hub unreachable, not cached, wrong id
        reason = short_reason(exc)
        raise ConfigError(
            f"cannot load dataset '{ds_id}' ({ds_conf or 'default'}, split {hf_split}) from the "
            f"Hugging Face hub ({reason}); run once where the hub is reachable (HF_HOME cache) "
            "or set data.source=local data.path=DIR with the split text files") from None
    field = _get(hf, "text_field", "text")
    return (str(row[field]).strip() for row in ds)


def iter_units(data_cfg, split: str):
    """Text units of `split` after holdout carving."""
    source = _get(data_cfg, "source", "local")
    if source not in ("local", "hf"):
        raise ConfigError(f"data.source={source!r} is unknown: use local or hf")
    hold = _get(data_cfg, "holdout")
    hold_split, hold_from = _get(hold, "split"), _get(hold, "from", "train")
    reader = _local_lines if source == "local" else _hf_units
    if not hold or split not in (hold_split, hold_from):
        return iter(reader(data_cfg, split))
    units = reader(data_cfg, hold_from)
    n_units, frac = _get(hold, "units"), _get(hold, "fraction")
    if frac is not None:  # the LAST fraction of the lines (needs a list: local mode)
        units = list(units)
        cut = len(units) - max(1, int(round(len(units) * float(frac))))
        return iter(units[cut:] if split == hold_split else units[:cut])
    if n_units is None:
        raise ConfigError("data.holdout needs fraction (local files) or units (first N units)")
    head = itertools.islice(units, int(n_units)) if split == hold_split else \
        itertools.islice(units, int(n_units), None)
    return iter(head)


# ----------------------------------------------------------------------------- token cache
class TokenCache:
    """A folder with <split>.bin (uint16 tokens) and manifest.json."""

    def __init__(self, root: Path, manifest: dict):
        self.root, self.manifest = Path(root), manifest

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["tokenizer"]["vocab_size"])

    @property
    def eos_id(self) -> int:
        return int(self.manifest["tokenizer"]["eos_id"])

    def has(self, split: str) -> bool:
        return split in self.manifest["splits"]

    def tokens(self, split: str) -> np.ndarray:
        if not self.has(split):
            raise ConfigError(f"token cache {self.root} has no {split} split: configure "
                              f"data.files.{split} / data.hf.splits.{split} or data.holdout")
        n = self.manifest["splits"][split]["tokens"]
        if n == 0:
            return np.zeros(0, dtype=np.uint16)
        return np.memmap(self.root / f"{split}.bin", dtype=np.uint16, mode="r", shape=(n,))

    def verify(self) -> None:
        for split, info in self.manifest["splits"].items():
            if _sha256(self.root / f"{split}.bin") != info["sha256"]:
                raise ConfigError(f"checksum mismatch in {self.root / (split + '.bin')}: delete "
                                  f"{self.root} to rebuild the token cache")

    @classmethod
    def load(cls, root) -> "TokenCache":
        with open(Path(root) / MANIFEST) as fh:
            return cls(root, json.load(fh))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_split(units, tokenizer, out: Path, max_tokens: int | None) -> dict:
    n_tok = n_units = 0
    with open(out, "wb") as fh:
        while max_tokens is None or n_tok < max_tokens:
            batch = list(itertools.islice(units, _ENCODE_BATCH))
            if not batch:
                break
            for ids in tokenizer.encode_batch(batch):
                arr = np.asarray(ids + [tokenizer.eos_id], dtype=np.uint16)
                if max_tokens is not None:
                    arr = arr[: max_tokens - n_tok]
                fh.write(arr.tobytes())
                n_tok += len(arr)
                n_units += 1
                if max_tokens is not None and n_tok >= max_tokens:
                    break
    return {"tokens": n_tok, "units": n_units, "sha256": _sha256(out)}


def cache_key(data_cfg, tokenizer) -> str:
    spec = {k: _plain(_get(data_cfg, k)) for k in ("source", "path", "files", "hf", "holdout",
                                                   "max_tokens")}
    if spec.get("path"):
        spec["path"] = str(Path(os.path.expanduser(str(spec["path"]))).resolve())
    spec["tokenizer"] = tokenizer.describe()
    return hashlib.sha1(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:12]


def build_token_cache(data_cfg, tokenizer, splits=SPLITS, rebuild: bool = False) -> TokenCache:
    """Tokenise every configured split once into cache_dir/<name>-<tokenizer>-<key>/."""
    root = Path(os.path.expanduser(str(_get(data_cfg, "cache_dir", "data/lm_cache"))))
    key = cache_key(data_cfg, tokenizer)
    root = root / f"{_get(data_cfg, 'name', 'lm')}-{tokenizer.name}-{key}"
    if (root / MANIFEST).is_file() and not rebuild:
        return TokenCache.load(root)
    # open every source first: a missing file or dataset fails before anything is written
    sources = {split: iter_units(data_cfg, split) for split in splits
               if _split_configured(data_cfg, split)}
    root.mkdir(parents=True, exist_ok=True)
    budgets = _get(data_cfg, "max_tokens", {})
    manifest = {"tokenizer": tokenizer.describe(), "dtype": "uint16", "splits": {},
                "source": {k: _plain(_get(data_cfg, k)) for k in ("source", "path", "files", "hf",
                                                                  "holdout")}}
    for split, units in sources.items():
        budget = _get(budgets, split)
        manifest["splits"][split] = _write_split(
            units, tokenizer, root / f"{split}.bin", None if budget is None else int(budget))
    tmp = root / (MANIFEST + ".tmp")
    with open(tmp, "w") as fh:  # manifest last: its presence marks a complete cache
        json.dump(manifest, fh, indent=2)
    tmp.replace(root / MANIFEST)
    return TokenCache(root, manifest)


def _split_configured(data_cfg, split) -> bool:
    if _get(_get(data_cfg, "holdout"), "split") == split:
        return True
    key = "files" if _get(data_cfg, "source", "local") == "local" else "hf"
    table = _get(data_cfg, key, {}) if key == "files" else _get(_get(data_cfg, "hf"), "splits", {})
    return bool(_get(table, split))


# ----------------------------------------------------------------------------- blocks
def block_ranges(n_tokens: int, block: int) -> list[tuple[int, int]]:
    """Non-overlapping target ranges [s, e) covering 0..n_tokens-1 (last one may be short)."""
    return [(s, min(s + block, n_tokens)) for s in range(0, n_tokens, block)]


def eval_windows(n_tokens: int, block: int, context: int = 0) -> list[tuple[int, int, int]]:
    """Evaluation windows (w, s, e): targets [s, e) are scored, the model reads from w. context=0:
    non-overlapping blocks (w = s). context=C > 0: fairseq eval_lm --context-window C, whose
    blocks hold block - C new tokens (fairseq_cli/eval_lm.py:244-246) each read after up to C
    previous tokens (fairseq/data/lm_context_window_dataset.py:54-76), so a window is <= block."""
    if not 0 <= context < block:
        raise ConfigError(f"task.datamodule.eval_context={context}: use 0 <= eval_context < "
                          f"eval_block={block}")
    stride = block - context
    return [(max(0, s - context), s, min(s + stride, n_tokens)) for s in range(0, n_tokens, stride)]


def block_pair(tokens: np.ndarray, start: int, end: int, eos_id: int):
    """(input, target) int64 tensors of one block; input[i] is the token before target[i]."""
    import torch  # late: `prepare` (tokenising only) runs without importing torch
    y = torch.from_numpy(np.asarray(tokens[start:end], dtype=np.int64))  # [L]
    prev = int(tokens[start - 1]) if start > 0 else eos_id
    x = torch.cat([torch.tensor([prev]), y[:-1]])  # [L]
    return x, y


def train_batches(tokens: np.ndarray, block: int, batch: int, eos_id: int, seed: int = 0):
    """Endless shuffled batches of full blocks ([B, block] inputs and targets), epoch by epoch."""
    import torch
    starts = np.arange(0, len(tokens) - block + 1, block)
    if len(starts) == 0:
        raise ConfigError(f"the train split has {len(tokens)} tokens, fewer than one block of "
                          f"{block}: use more text or a smaller train.seq_len")
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(starts)
        for i in range(0, len(order) - batch + 1 if len(order) >= batch else 1, batch):
            pairs = [block_pair(tokens, int(s), int(s) + block, eos_id) for s in order[i:i + batch]]
            yield torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


# ---- the framework's datamodule (conf/task/lm_*.yaml): batches are {"input": [B, L], "target":
# [B, L]} blocks; training uses full non-overlapping blocks (shuffled each epoch, as fairseq
# does); validation and test use every block of the split, the short last one padded with target
# -100, so the `ppl` metric = exp(sum NLL / N) counts every token exactly once.
class BlockDataset(Dataset):
    """Full training blocks, or evaluation windows (eval_windows): inputs from w, targets [s, e)
    scored, the context positions [w, s) and a short last window's padding get target -100."""

    def __init__(self, tokens: np.ndarray, block: int, eos_id: int, full_only: bool,
                 context: int = 0):
        self.tokens, self.block, self.eos_id = tokens, block, eos_id
        self.windows = eval_windows(len(tokens), block, context)
        if full_only:
            self.windows = [r for r in self.windows if r[2] - r[0] == block]

    def __len__(self):
        return len(self.windows)

    def __getitem__(self, i):
        w, s, e = self.windows[i]
        x, y = block_pair(self.tokens, w, e, self.eos_id)  # [e - w] each
        y[:s - w] = IGNORE  # context tokens: read, not scored (each token is scored once)
        pad = self.block - (e - w)
        if pad:  # the split's short last block: padded positions are not scored
            x, y = F.pad(x, (0, pad), value=self.eos_id), F.pad(y, (0, pad), value=IGNORE)
        return {"input": x, "target": y}


class LMDataModule(L.LightningDataModule):
    def __init__(self, data: dict, tokenizer: dict, seq_len: int = 512, batch_size: int = 16,
                 eval_block: int | None = None, eval_batch_size: int | None = None,
                 vocab_size: int | None = None, num_workers: int = 0, eval_context: int = 0):
        """eval_context: 0 = non-overlapping eval_block blocks (the protocol's reading, conf/table/
        table2.yaml note); C > 0 = fairseq's --context-window C (eval_windows). Not in the task
        yaml, so the protocol runs keep their ids: `+task.datamodule.eval_context=C`."""
        super().__init__()
        self.data_cfg, self.tok_cfg = data, tokenizer
        self.seq_len, self.batch_size = seq_len, batch_size
        self.eval_block = eval_block or seq_len
        self.eval_batch_size = eval_batch_size or batch_size
        self.vocab_size, self.num_workers = vocab_size, num_workers
        self.eval_context = eval_context
        self.sets: dict[str, Dataset] = {}

    def example_batch(self, batch_size: int, device="cpu") -> dict:
        """Random token ids of a training batch's shape, no data read (the training benchmark,
        the dry-run); the vocabulary is task.vocab_size (the tokenizer's is only known once read)."""
        if self.vocab_size is None:
            raise ValueError("example_batch needs task.vocab_size (set it in the task config)")
        return random_tokens(batch_size, self.seq_len, self.vocab_size, device)

    def check(self):
        """Cheap checks before training (no hub access): local files and tokenizer path."""
        eval_windows(0, self.eval_block, self.eval_context)  # a bad eval_context: one line
        d = self.data_cfg
        if d.get("source", "local") == "local":
            if not d.get("path"):
                raise ConfigError("local LM data has no default folder: set "
                                  "task.datamodule.data.path=DIR with the text files "
                                  "(e.g. a WikiText-2 raw folder with valid.txt and test.txt)")
            for split, name in (d.get("files") or {}).items():
                f = Path(os.path.expanduser(str(d["path"]))) / str(name)
                if name and not f.is_file():
                    raise ConfigError(f"missing {split} text file {f}: fix "
                                      f"task.datamodule.data.path / data.files.{split}")
        tp = self.tok_cfg.get("path")
        if tp and not Path(os.path.expanduser(str(tp))).exists():
            raise ConfigError(f"tokenizer path {tp} does not exist: set "
                              "task.datamodule.tokenizer.path to the GPT-2 tokenizer folder")

    def setup(self, stage=None):
        if self.sets:
            return
        cache = build_token_cache(self.data_cfg, tokenizer_from_cfg(self.tok_cfg))
        if self.vocab_size is not None and cache.vocab_size > self.vocab_size:
            raise ConfigError(f"task.vocab_size={self.vocab_size} < the tokenizer's "
                              f"{cache.vocab_size}: raise task.vocab_size")
        self.eos_id = cache.eos_id
        self.sets["train"] = BlockDataset(cache.tokens("train"), self.seq_len, cache.eos_id, True)
        for split, name in (("val", "valid"), ("test", "test")):
            if cache.has(name):
                self.sets[split] = BlockDataset(cache.tokens(name), self.eval_block,
                                                cache.eos_id, False, self.eval_context)

    def _loader(self, split, shuffle, bs):
        if split not in self.sets:
            raise ConfigError(f"the LM data has no {split} split: configure it in "
                              "task.datamodule.data (files / hf.splits / holdout)")
        return DataLoader(self.sets[split], batch_size=bs, shuffle=shuffle, drop_last=shuffle,
                          num_workers=self.num_workers)

    def train_dataloader(self):
        return self._loader("train", True, self.batch_size)

    def val_dataloader(self):
        return self._loader("val", False, self.eval_batch_size)

    def test_dataloader(self):
        return self._loader("test", False, self.eval_batch_size)
