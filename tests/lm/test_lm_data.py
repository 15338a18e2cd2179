"""Token cache: round trip, manifest, checksums, holdout, budgets, HF path, missing-data errors."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from tasks.lm import data as lm_data
from tasks.lm.data import TokenCache, build_token_cache
from tasks.common.errors import ConfigError
from tasks.lm.tokenizer import ByteTokenizer, load_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def _cfg(text_dir, tmp_path, **kw):
    base = dict(name="t", source="local", path=str(text_dir), cache_dir=str(tmp_path / "cache"),
                files=dict(train="train.txt", valid="valid.txt", test="test.txt"))
    return OmegaConf.create({**base, **kw})


def _lines(path):
    return [ln.strip() for ln in Path(path).read_text(encoding="utf-8").split("\n")[:-1]]


def _split_units(tokens, eos):
    out, cur = [], []
    for t in tokens.tolist():
        if t == eos:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    assert cur == [], "the stream must end with eos"
    return out


def test_byte_cache_round_trip(text_dir, tmp_path):
    tok = ByteTokenizer()
    cache = build_token_cache(_cfg(text_dir, tmp_path), tok)
    for split in ("train", "valid", "test"):
        lines = _lines(text_dir / f"{split}.txt")
        toks = cache.tokens(split)
        assert toks.dtype == np.uint16
        info = cache.manifest["splits"][split]
        assert info["tokens"] == len(toks) == sum(len(ln.encode()) + 1 for ln in lines)
        assert info["units"] == len(lines)
        assert info["sha256"] == hashlib.sha256(toks.tobytes()).hexdigest()
        assert [tok.decode(u) for u in _split_units(toks, tok.eos_id)] == lines
    cache.verify()
    # a second build reuses the cache (same folder, files untouched)
    bin_file = cache.root / "train.bin"
    mtime = bin_file.stat().st_mtime_ns
    again = build_token_cache(_cfg(text_dir, tmp_path), tok)
    assert again.root == cache.root and bin_file.stat().st_mtime_ns == mtime
    manifest = json.loads((cache.root / "manifest.json").read_text())
    assert manifest["tokenizer"] == {"name": "byte", "vocab_size": 257, "eos_id": 256}
    # a corrupted file is caught by the checksum
    with open(bin_file, "r+b") as fh:
        fh.write(b"\x01\x02")
    with pytest.raises(ConfigError, match="checksum mismatch"):
        TokenCache.load(cache.root).verify()


@pytest.mark.parametrize("form", ["tokenizer.json", "vocab+merges"])
def test_bpe_tokenizer_from_local_files(text_dir, tmp_path, form):
    """GPT-2-style byte-level BPE loaded from files (what tokenizer.path does offline)."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train([str(text_dir / "train.txt")], vocab_size=400, min_frequency=1,
              special_tokens=["<|endoftext|>"], show_progress=False)
    tdir = tmp_path / "tok"
    tdir.mkdir()
    if form == "tokenizer.json":
        bpe.save(str(tdir / "tokenizer.json"))
    else:
        bpe.save_model(str(tdir))  # vocab.json + merges.txt, the original GPT-2 file layout
    tok = load_tokenizer("gpt2", str(tdir))
    cache = build_token_cache(_cfg(text_dir, tmp_path), tok)
    toks = cache.tokens("valid")
    assert [tok.decode(u) for u in _split_units(toks, tok.eos_id)] == _lines(text_dir / "valid.txt")


def test_holdout_fraction_and_budget(text_dir, tmp_path):
    cfg = _cfg(text_dir, tmp_path, files=dict(train="valid.txt", test="test.txt"),
               holdout={"split": "valid", "from": "train", "fraction": 0.1},
               max_tokens={"test": 100})
    cache = build_token_cache(cfg, ByteTokenizer())
    lines = _lines(text_dir / "valid.txt")
    n_val = round(len(lines) * 0.1)
    assert cache.manifest["splits"]["valid"]["units"] == n_val  # the LAST 10% of the lines
    assert cache.manifest["splits"]["train"]["units"] == len(lines) - n_val
    tail = np.concatenate([cache.tokens("train"), cache.tokens("valid")])
    assert len(tail) == sum(len(ln.encode()) + 1 for ln in lines)
    assert len(cache.tokens("test")) == 100


def test_hf_source_with_streaming_holdout(tmp_path, monkeypatch):
    """The hub path with a stand-in `load_dataset`: split names, text field, document units."""
    docs = [{"text": f"document number {i} says hello\n"} for i in range(20)]
    calls = []

    def fake_load_dataset(ds_id, conf, split, streaming):
        calls.append((ds_id, conf, split, streaming))
        return iter(docs)

    import datasets
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    cfg = OmegaConf.create(dict(
        name="owt", source="hf", cache_dir=str(tmp_path / "c"),
        hf=dict(id="some/owt2", config=None, splits=dict(train="train"), text_field="text",
                streaming=True),
        holdout={"split": "valid", "from": "train", "units": 3}, max_tokens={"train": 50}))
    cache = build_token_cache(cfg, ByteTokenizer())
    assert calls and all(c == ("some/owt2", None, "train", True) for c in calls)
    assert cache.manifest["splits"]["valid"]["units"] == 3
    assert ByteTokenizer().decode(cache.tokens("valid")[:30]).startswith("document number 0 says")
    assert len(cache.tokens("train")) == 50  # the token budget cuts the stream exactly
    assert ByteTokenizer().decode(cache.tokens("train")[:18]) == "document number 3 "


def test_missing_local_file_names_it(text_dir, tmp_path):
    cfg = _cfg(text_dir, tmp_path, files=dict(train="nope.txt"))
    with pytest.raises(ConfigError) as err:
        build_token_cache(cfg, ByteTokenizer())
    msg = str(err.value)
    assert "\n" not in msg and "nope.txt" in msg and "data.path" in msg
    with pytest.raises(ConfigError, match="data.path=DIR"):
        lm_data.iter_units(OmegaConf.create(dict(source="local", files={"train": "a"})), "train")


def test_missing_tokenizer_path_names_it(tmp_path):
    with pytest.raises(ConfigError, match="tokenizer.path=.*does not exist"):
        load_tokenizer("gpt2", str(tmp_path / "absent"))


def test_unreachable_hub_tokenizer_cli_one_line(tmp_path):
    """The hub is unreachable here: the paper profile must fail in one actionable line."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "tasks.lm.prepare", "experiment=table2/wikitext103",
                        "profile=paper", f"task.datamodule.data.cache_dir={tmp_path / 'c'}"], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=300)  # a hang guard: took >120 s beside 2 trainings + 1 test run
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: cannot load the gpt2 tokenizer 'gpt2' from the Hugging Face")
    assert "tokenizer.path=" in r.stderr


def test_unreachable_hub_dataset_message(tmp_path, monkeypatch):
    import datasets
    import huggingface_hub.constants as hub_constants
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # no network, no cache:
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)  # what this machine sees
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "ds")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from tests_lm_paths import CONF
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=table2/wikitext103", "profile=paper",
                                          f"task.datamodule.data.cache_dir={tmp_path / 'c'}"])
    with pytest.raises(ConfigError) as err:
        build_token_cache(OmegaConf.to_container(cfg.task.datamodule.data, resolve=True),
                          ByteTokenizer())
    msg = str(err.value)
    assert "\n" not in msg and "cannot load dataset 'Salesforce/wikitext'" in msg
    assert "data.source=local data.path=DIR" in msg


def test_prepare_without_data_path_names_the_override(tmp_path, capsys):
    """`make reproduce-table2 PROFILE=cpu` without ARGS first runs `tasks.lm.prepare
    --before-training`: one line naming the full override (not the node-relative data.path)."""
    from tasks.lm.prepare import main
    rc = main(["--before-training", "experiment=table2/wikitext103", "profile=cpu",
               f"task.datamodule.data.cache_dir={tmp_path / 'c'}"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "task.datamodule.data.path=DIR" in err, err
