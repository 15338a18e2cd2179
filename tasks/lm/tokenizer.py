"""Tokenizers for the LM task: GPT-2 BPE (the paper's) and a byte-level one that needs no download.

Every tokenizer appends `eos_id` after each text unit (a line for WikiText, as fairseq-preprocess
appends </s> to every line; a document for OpenWebText2, as GPT-2 pipelines do).
"""
from __future__ import annotations

import os
from pathlib import Path

from tasks.common.errors import ConfigError, short_reason


class ByteTokenizer:
    """UTF-8 bytes 0..255 plus eos = 256. Lossless, no files, vocab 257."""

    name = "byte"
    vocab_size = 257
    eos_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def describe(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size, "eos_id": self.eos_id}


class HFTokenizer:
    """A `tokenizers.Tokenizer` (GPT-2 BPE from the hub, or any tokenizer.json / vocab+merges)."""

    def __init__(self, tok, name: str, source: str, eos_token: str = "<|endoftext|>"):
        self.tok, self.name, self.source = tok, name, source
        eos = tok.token_to_id(eos_token)
        if eos is None:
            raise ConfigError(f"tokenizer {source} has no end-of-text token {eos_token!r}: "
                              "use a GPT-2 style tokenizer or set tokenizer.eos_token")
        self.eos_id = eos
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        if self.vocab_size > 65535:
            raise ConfigError(f"tokenizer {source} has {self.vocab_size} tokens; the uint16 "
                              "token cache holds at most 65535")

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids))

    def describe(self) -> dict:
        return {"name": self.name, "source": self.source, "vocab_size": self.vocab_size,
                "eos_id": self.eos_id}


def _from_folder(path: Path, name: str, eos_token: str) -> HFTokenizer:
    from tokenizers import Tokenizer
    from tokenizers.decoders import ByteLevel as ByteLevelDecoder
    from tokenizers.models import BPE
    from tokenizers.pre_tokenizers import ByteLevel

    if path.is_file():
        return HFTokenizer(Tokenizer.from_file(str(path)), name, str(path), eos_token)
    if (path / "tokenizer.json").is_file():
        return HFTokenizer(Tokenizer.from_file(str(path / "tokenizer.json")), name, str(path),
                           eos_token)
    vocab, merges = path / "vocab.json", path / "merges.txt"
    if vocab.is_file() and merges.is_file():  # the original GPT-2 encoder files
        tok = Tokenizer(BPE.from_file(str(vocab), str(merges)))
        tok.pre_tokenizer = ByteLevel(add_prefix_space=False)
        tok.decoder = ByteLevelDecoder()
        return HFTokenizer(tok, name, str(path), eos_token)
    raise ConfigError(f"tokenizer.path={path} holds neither tokenizer.json nor vocab.json + "
                      "merges.txt: put the GPT-2 tokenizer files there or use tokenizer.name=byte")


def load_tokenizer(name: str = "gpt2", path: str | None = None, hub_id: str = "gpt2",
                   eos_token: str = "<|endoftext|>"):
    """`byte`, or a BPE tokenizer from `path` (folder or tokenizer.json) or the HF hub (`hub_id`).

    Raises ConfigError with one line naming what is missing and how to provide it."""
    if name == "byte":
        return ByteTokenizer()
    if path:
        p = Path(os.path.expanduser(str(path)))
        if not p.exists():
            raise ConfigError(f"tokenizer.path={p} does not exist: point it at a folder with "
                              "tokenizer.json (or vocab.json + merges.txt) for GPT-2")
        return _from_folder(p, name, eos_token)
    try:
        from tokenizers import Tokenizer
        return HFTokenizer(Tokenizer.from_pretrained(hub_id), name, f"hub:{hub_id}", eos_token)
    except ConfigError:
        raise
    except Exception as exc:  # hub unreachable, not cached, bad id
        reason = short_reason(exc)
        raise ConfigError(
            f"cannot load the {name} tokenizer '{hub_id}' from the Hugging Face hub ({reason}); "
            f"copy tokenizer.json (or vocab.json + merges.txt) of '{hub_id}' into a folder and "
            "set tokenizer.path=FOLDER, or use tokenizer.name=byte") from None


def tokenizer_from_cfg(cfg) -> object:
    """cfg: mapping with name, path (optional), hub_id (optional)."""
    get = cfg.get if hasattr(cfg, "get") else (lambda k, d=None: getattr(cfg, k, d))
    return load_tokenizer(get("name", "gpt2"), get("path", None), get("hub_id", "gpt2") or "gpt2",
                          get("eos_token", "<|endoftext|>") or "<|endoftext|>")
