"""Tokenise an LM experiment's data once into the uint16 token cache and print its manifest.

It composes the same Hydra config as `python -m tasks.train` (experiment, profile, overrides),
so the cache it writes is the one the runs read (task.datamodule.data.cache_dir):
  python -m tasks.lm.prepare experiment=table2/wikitext103 profile=paper   # WikiText-103, GPT-2 BPE
  python -m tasks.lm.prepare experiment=table2/wikitext103 task.datamodule.data.path=DIR
`make reproduce-table2 PROFILE=paper` runs it first with --before-training (parallel runs would
race to build the cache; without CUDA it stops at once, like the training command).
Exit status 2 with one line on stderr when the tokenizer or the data cannot be loaded.
"""
from __future__ import annotations

import json
import sys

from tasks.common.errors import ConfigError


def main(argv=None) -> int:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from tasks.common.store import CONF
    from tasks.common.validate import check_device, check_overrides

    from .data import build_token_cache
    from .tokenizer import tokenizer_from_cfg

    overrides = list(sys.argv[1:] if argv is None else argv)
    rebuild, before_training = "--rebuild" in overrides, "--before-training" in overrides
    overrides = [o for o in overrides if o not in ("--rebuild", "--before-training")]
    try:
        check_overrides(overrides)
        if before_training:  # make reproduce-table2 PROFILE=paper: no GPU, no point tokenising
            check_device(overrides)
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", overrides=overrides)
        dm = cfg.task.datamodule
        if "tokenizer" not in dm:
            raise ConfigError(f"task {cfg.task.name} is not a language-modelling task: pass "
                              "experiment=table2/wikitext103 or experiment=fig4/owt2")
        from tasks.common.runner import check_data
        check_data(cfg)  # the datamodule's own check: its one line names the override to set
        data = OmegaConf.to_container(dm.data, resolve=True)
        cache = build_token_cache(data, tokenizer_from_cfg(OmegaConf.to_container(dm.tokenizer)),
                                  rebuild=rebuild)
        cache.verify()
    except (ConfigError, HydraException) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(json.dumps({"cache": str(cache.root), **cache.manifest}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
