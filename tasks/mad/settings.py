"""The 66 MAD benchmark settings (mad-lab `configs/tasks/*.yml`); the lr x weight-decay grid is
swept by conf/experiment/table1/mad.yaml.

Each task has a baseline; every other setting changes exactly one variable of the baseline.
A setting is a plain dict (hashable into the data cache) with the keys the generators read.
"""
from __future__ import annotations

from tasks.common.errors import ConfigError, NotInProtocol

NUM_TEST_EXAMPLES = 1280
# mad-lab before its 2024-12-09 fix (commit 35772e8) never passed num_tokens_to_copy to the
# generator, so every selective-copying setting (copy32/64/96 included) copied and scored the
# generator's default of 16 tokens; `copy_pre_fix=True` reproduces that for paper runs made earlier.
PRE_FIX_COPY_TOKENS = 16

TASKS = ("in-context-recall", "fuzzy-in-context-recall", "noisy-in-context-recall",
         "selective-copying", "compression", "memorization")
_N_VARIATIONS = [6400, 3200, 1600, 800]
BASELINES: dict[str, dict] = {
    "in-context-recall": dict(vocab_size=16, seq_len=128, num_train_examples=12800),
    "fuzzy-in-context-recall": dict(vocab_size=16, seq_len=128, num_train_examples=12800,
                                    k_motif_size=3, v_motif_size=3),
    "noisy-in-context-recall": dict(vocab_size=32, seq_len=128, num_train_examples=12800,
                                    noise_vocab_size=16, frac_noise=0.2),
    "selective-copying": dict(vocab_size=16, seq_len=256, num_train_examples=12800,
                              num_tokens_to_copy=16),
    "compression": dict(vocab_size=16, seq_len=32, num_train_examples=12800),
    "memorization": dict(vocab_size=256, seq_len=32, num_train_examples=256),
}
VARIATIONS: dict[str, dict[str, list]] = {
    "in-context-recall": dict(vocab_size=[32, 64, 128], seq_len=[256, 512, 1024],
                              num_train_examples=_N_VARIATIONS),
    "fuzzy-in-context-recall": dict(vocab_size=[32, 64, 128], seq_len=[256, 512, 1024],
                                    num_train_examples=_N_VARIATIONS),
    "noisy-in-context-recall": dict(vocab_size=[48, 80, 144], seq_len=[256, 512, 1024],
                                    num_train_examples=_N_VARIATIONS,
                                    frac_noise=[0.4, 0.6, 0.8]),
    "selective-copying": dict(vocab_size=[32, 64, 128], seq_len=[512, 1024],
                              num_train_examples=_N_VARIATIONS, num_tokens_to_copy=[32, 64, 96]),
    "compression": dict(vocab_size=[32, 64, 128], seq_len=[64, 128, 256],
                        num_train_examples=_N_VARIATIONS),
    "memorization": dict(vocab_size=[512, 1024, 2048, 4096, 8192]),
}


def setting_name(setting: dict) -> str:
    """Short unique id, e.g. 'in-context-recall/baseline' or 'in-context-recall/seq_len=256'."""
    var = setting.get("varied")
    tail = "baseline" if var is None else f"{var}={setting[var]}"
    return f"{setting['task']}/{tail}"


def task_settings(task: str) -> list[dict]:
    """Baseline first, then each variable varied alone, in the order of mad-lab's task config."""
    if task not in BASELINES:
        raise ValueError(f"unknown MAD task {task!r}; pick one of {TASKS}")
    base = dict(task=task, num_test_examples=NUM_TEST_EXAMPLES, **BASELINES[task])
    out = [dict(base, varied=None)]
    for var, values in VARIATIONS[task].items():
        out += [dict(base, **{var: value}, varied=var) for value in values]
    return out


def all_settings() -> list[dict]:
    """All 66 benchmark settings."""
    return [s for task in TASKS for s in task_settings(task)]


_ID_PREFIX = {"vocab_size": "V", "seq_len": "L", "num_train_examples": "N",
              "frac_noise": "noise", "num_tokens_to_copy": "copy"}


def setting_id(setting: dict) -> str:
    """Config-friendly id inside a task: 'baseline', 'V32', 'L256', 'N6400', 'noise0.4', 'copy32'."""
    var = setting.get("varied")
    return "baseline" if var is None else f"{_ID_PREFIX[var]}{setting[var]}"


def find_setting(task: str, sid: str) -> dict:
    """The setting of `task` whose id is `sid` (ConfigError-style message listing the valid ids)."""
    options = {setting_id(s): s for s in task_settings(task)}
    if sid not in options and any(sid in {setting_id(s) for s in task_settings(t)} for t in TASKS):
        raise NotInProtocol(f"{task} has no setting {sid}: use one of {', '.join(options)} "
                            "(tasks/mad/settings.py)")
    if sid not in options:
        raise ValueError(f"unknown MAD setting {sid!r} for {task}: use one of {', '.join(options)}")
    return options[sid]


def resolve_setting(mad_task: str, setting: str, num_train: int | None = None,
                    num_test: int | None = None, max_train: int | None = None,
                    copy_pre_fix: bool = False) -> dict:
    """The setting dict of (task, setting id) with the size overrides applied; `copy_pre_fix`
    (selective copying only) copies PRE_FIX_COPY_TOKENS tokens whatever the setting says."""
    try:
        s = dict(find_setting(mad_task, setting))
    except ValueError as e:
        raise ConfigError(f"{e} (task.mad_task / task.setting)") from None
    if num_train is not None:
        s["num_train_examples"] = int(num_train)
    if num_test is not None:
        s["num_test_examples"] = int(num_test)
    if max_train is not None:  # a cap, never more than the protocol's size (smoke profile)
        s["num_train_examples"] = min(s["num_train_examples"], int(max_train))
    if copy_pre_fix and mad_task == "selective-copying":
        s["num_tokens_to_copy"] = PRE_FIX_COPY_TOKENS
    return s
