"""Tokenise an LM experiment's data once into the uint16 token cache and print its manifest.

  python -m tasks.lm.prepare table2 --profile paper          # WikiText-103 raw, GPT-2 BPE
  python -m tasks.lm.prepare table2 --profile smoke data.path=../shared/data/wikitext-2
Exit status 2 with one line on stderr when the tokenizer or the data cannot be loaded.
"""
from __future__ import annotations

import argparse
import json
import sys

from .data import build_token_cache
from .errors import LMDataError
from .profiles import get_config
from .tokenizer import tokenizer_from_cfg


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", choices=["table2", "fig4"])
    ap.add_argument("--profile", default="smoke", choices=["smoke", "paper"])
    ap.add_argument("--rebuild", action="store_true", help="re-tokenise even if cached")
    ap.add_argument("overrides", nargs="*", help="dotlist overrides, e.g. data.path=DIR")
    a = ap.parse_intermixed_args(argv)
    cfg = get_config(a.experiment, a.profile, a.overrides)
    try:
        cache = build_token_cache(cfg.data, tokenizer_from_cfg(cfg.tokenizer), rebuild=a.rebuild)
        cache.verify()
    except LMDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"cache": str(cache.root), **cache.manifest}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
