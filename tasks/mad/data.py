"""MAD's six synthetic tasks (mad-lab, `mad/data/instances.py`), re-written from the protocol.

Every generator is a pure function of its arguments and a `np.random.Generator`; it returns
`(inputs, targets)` int64 arrays of one sequence. Unscored targets are -100. The benchmark runs
the *multi-query* variant of the recall tasks (mad-lab's task configs set `multi_query: True`):
no copy-prefix token, and at test time every value whose key was already seen is scored.

Token layouts (V = vocab_size):
- recall:        keys [0, V'/2), values [V'/2, V'), V' = V - noise_vocab_size; noise = last 16 ids
- fuzzy recall:  pad V-1; keys/values are 1..3 distinct tokens from [0,(V-1)//2) / [(V-1)//2, V-1)
- selective copy: content [0, V-2), blank V-2, copy V-1
- compression:   content [0, V-1), compression token V-1
- memorization:  keys [0,(V-1)//2), values [(V-1)//2, V-1), insert token V-1

Example (in-context recall, V=16, L=8, test):
>>> x, y = in_context_recall(np.random.default_rng(0), vocab_size=16, seq_len=8, is_training=False)
>>> x.tolist(), y.tolist()
([6, 14, 5, 9, 4, 8, 5], [-100, -100, -100, -100, -100, -100, 9])
"""
from __future__ import annotations

import numpy as np

from tasks.common.errors import NotInProtocol
from tasks.common.objective import IGNORE
from tasks.synthetic_common.data import TrainTestDataModule

from .settings import find_setting, resolve_setting


def in_context_recall(rng: np.random.Generator, vocab_size: int = 16, seq_len: int = 128,
                      is_training: bool = True, noise_vocab_size: int = 0,
                      frac_noise: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(Noisy) in-context recall: L/2 - 1 key-value pairs, then a probe of a seen key.

    A fresh key->value map per sequence. With frac_noise > 0 each pair slot is replaced by two
    noise tokens with that probability, except one slot that always holds a real pair. The model
    reads inputs[:-1] (length L-1). Train targets: the next token everywhere. Test targets: the
    value of every pair whose key appeared in an earlier pair, plus the probe's value.
    """
    if seq_len % 2 or seq_len < 4:
        raise ValueError(f"seq_len must be even and >= 4, got {seq_len}")
    if not 0.0 <= frac_noise < 1.0:
        raise ValueError(f"frac_noise must be in [0, 1), got {frac_noise}")
    if frac_noise > 0 and noise_vocab_size < 1:
        raise ValueError("frac_noise > 0 needs noise_vocab_size > 0")
    n_real = vocab_size - noise_vocab_size  # non-special vocabulary (multi-query: no copy prefix)
    if n_real < 2:
        raise ValueError(f"vocab_size={vocab_size} leaves no room for keys and values")
    n_keys = n_real // 2
    n_ctx = seq_len // 2 - 1  # context pairs before the probe

    keys = rng.integers(0, n_keys, size=n_ctx)
    value_of_key = rng.integers(n_keys, n_real, size=n_keys)  # this sequence's key->value map
    is_noise = (rng.random(n_ctx) < frac_noise) if frac_noise > 0 else np.zeros(n_ctx, bool)
    is_noise[rng.integers(n_ctx)] = False  # at least one real pair, so the probe has a key
    noise = rng.integers(n_real, n_real + max(noise_vocab_size, 1), size=(n_ctx, 2))

    pairs = np.stack([keys, value_of_key[keys]], axis=1)  # [n_ctx, 2]
    pairs[is_noise] = noise[is_noise]
    real = np.flatnonzero(~is_noise)
    # a pair's value is scored (test) when its key already appeared in an earlier real pair
    _, first = np.unique(keys[real], return_index=True)
    repeated = np.ones(len(real), bool)
    repeated[first] = False
    pair_targets = np.full((n_ctx, 2), IGNORE)
    pair_targets[real[repeated], 1] = pairs[real[repeated], 1]

    presented = np.unique(keys[real])
    k_probe = presented[rng.integers(len(presented))]
    probe = np.array([k_probe, value_of_key[k_probe]])
    tokens = np.concatenate([pairs.reshape(-1), probe])  # [L]
    targets = np.concatenate([pair_targets.reshape(-1), [IGNORE, probe[1]]])
    if is_training:
        return tokens[:-1], tokens[1:]
    return tokens[:-1], targets[1:]


def _motif(rng: np.random.Generator, vocab: np.ndarray, size: int) -> tuple:
    """A uniformly random ordered tuple of `size` distinct tokens (a permutation of the vocab)."""
    return tuple(int(t) for t in rng.choice(vocab, size=size, replace=False))


def fuzzy_in_context_recall(rng: np.random.Generator, vocab_size: int = 16, seq_len: int = 128,
                            is_training: bool = True, k_motif_size: int = 3,
                            v_motif_size: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Fuzzy in-context recall: keys and values are tuples of 1..k (1..v) distinct tokens.

    Train keys take a random size in 1..k, test keys always size k. One key-value "probe" pair
    is placed at a random point of the context and repeated at the end; sequences are left-padded
    with the pad token V-1 to L+1 tokens before the shift. Targets as in in-context recall.
    """
    pad = vocab_size - 1
    n_real = vocab_size - 1
    key_vocab, value_vocab = np.arange(n_real // 2), np.arange(n_real // 2, n_real)
    if len(key_vocab) < k_motif_size or len(value_vocab) < v_motif_size:
        raise ValueError(f"vocab_size={vocab_size} too small for motifs of {k_motif_size}/"
                         f"{v_motif_size} distinct tokens")
    key_sizes = list(range(1, k_motif_size + 1)) if is_training else [k_motif_size]
    value_sizes = list(range(1, v_motif_size + 1))

    k_probe = _motif(rng, key_vocab, int(rng.choice(key_sizes)))
    v_probe = _motif(rng, value_vocab, int(rng.choice(value_sizes)))
    probe_len = len(k_probe) + len(v_probe)
    if seq_len - 2 * probe_len < 1:
        raise ValueError(f"seq_len={seq_len} too short for the fuzzy recall probe")
    probe_at = int(rng.integers(seq_len - 2 * probe_len))

    value_of: dict[tuple, tuple] = {}
    presented: set[tuple] = set()
    inputs: list[int] = []
    targets: list[int] = []
    probe_added = False
    while len(inputs) < seq_len - probe_len - (k_motif_size + v_motif_size):
        k_size, v_size = int(rng.choice(key_sizes)), int(rng.choice(value_sizes))
        if len(inputs) >= probe_at and not probe_added:
            inputs += [*k_probe, *v_probe]
            targets += [IGNORE] * probe_len
            value_of[k_probe] = v_probe
            presented.add(k_probe)
            probe_added = True
            continue
        k = _motif(rng, key_vocab, k_size)
        if k == k_probe:
            v, probe_added = v_probe, True
        elif k in value_of:
            v = value_of[k]
        else:
            v = value_of[k] = _motif(rng, value_vocab, v_size)
        inputs += [*k, *v]
        targets += [IGNORE] * len(k) + (list(v) if k in presented else [IGNORE] * len(v))
        presented.add(k)

    inputs += [*k_probe, *v_probe]
    targets += [IGNORE] * len(k_probe) + list(v_probe)
    n_pad = seq_len + 1 - len(inputs)  # always >= 1 by the loop bound above
    tokens = np.array([pad] * n_pad + inputs, dtype=np.int64)
    tgt = np.array([IGNORE] * n_pad + targets, dtype=np.int64)
    if is_training:
        return tokens[:-1], tokens[1:]
    return tokens[:-1], tgt[1:]


def selective_copying(rng: np.random.Generator, vocab_size: int = 16, seq_len: int = 256,
                      num_tokens_to_copy: int = 16, is_training: bool = True
                      ) -> tuple[np.ndarray, np.ndarray]:
    """n content tokens scattered among blanks, then the copy token and n blanks.

    Only the last n positions are scored (targets = the content tokens in order; the same for
    train and test). As in mad-lab, blanks are inserted *before* a uniformly chosen content token
    (np.insert at an index in [0, n)), so the last content token always directly precedes the copy
    token and the blank counts per gap are multinomial.
    """
    n = num_tokens_to_copy
    n_blank = seq_len - 2 * n - 1
    if n < 1 or n_blank < 1:
        raise ValueError(f"seq_len={seq_len} must exceed 2*num_tokens_to_copy+1={2 * n + 1}")
    copy_tok, blank = vocab_size - 1, vocab_size - 2
    to_copy = rng.integers(0, vocab_size - 2, size=n)
    blanks_before = rng.multinomial(n_blank, np.full(n, 1.0 / n))
    positions = np.arange(n) + np.cumsum(blanks_before)  # index of content token j
    inputs = np.full(seq_len, blank, dtype=np.int64)
    inputs[positions] = to_copy
    inputs[seq_len - n - 1] = copy_tok
    targets = np.full(seq_len, IGNORE, dtype=np.int64)
    targets[-n:] = to_copy
    return inputs, targets


def compression(rng: np.random.Generator, vocab_size: int = 16, seq_len: int = 32,
                is_training: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """L-1 random tokens then the compression token V-1; the target is the whole input."""
    inputs = np.concatenate([rng.integers(0, vocab_size - 1, size=seq_len - 1), [vocab_size - 1]])
    return inputs.astype(np.int64), inputs.astype(np.int64).copy()


def memorization_map(vocab_size: int, kv_seed: int = 12345) -> np.ndarray:
    """The fixed global key->value map (index = key), from a fixed seed shared by train and test."""
    n_real = vocab_size - 1  # V-1 is the insert token
    keys_n = n_real // 2
    values = np.random.default_rng(kv_seed).permutation(np.arange(keys_n, n_real))
    return values[:keys_n]


def memorization(rng: np.random.Generator, vocab_size: int = 256, seq_len: int = 32,
                 is_training: bool = True, kv_map: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """L/2 pairs (key, insert token); the key's fixed value is scored at the insert position."""
    kv_map = memorization_map(vocab_size) if kv_map is None else kv_map
    keys = rng.integers(0, len(kv_map), size=seq_len // 2)
    inputs = np.stack([keys, np.full_like(keys, vocab_size - 1)], axis=1).reshape(-1)
    targets = np.stack([np.full_like(keys, IGNORE), kv_map[keys]], axis=1).reshape(-1)
    return inputs, targets


def _generate_instances(task: str, setting: dict, n: int, rng: np.random.Generator,
                        is_training: bool) -> tuple[np.ndarray, np.ndarray]:
    V, L = setting["vocab_size"], setting["seq_len"]
    if task in ("in-context-recall", "noisy-in-context-recall"):
        fn = lambda: in_context_recall(rng, V, L, is_training, setting.get("noise_vocab_size", 0),
                                       setting.get("frac_noise", 0.0))
    elif task == "fuzzy-in-context-recall":
        fn = lambda: fuzzy_in_context_recall(rng, V, L, is_training, setting.get("k_motif_size", 3),
                                             setting.get("v_motif_size", 3))
    elif task == "selective-copying":
        fn = lambda: selective_copying(rng, V, L, setting["num_tokens_to_copy"], is_training)
    elif task == "compression":
        fn = lambda: compression(rng, V, L, is_training)
    elif task == "memorization":
        kv_map = memorization_map(V, setting.get("kv_seed", 12345))
        fn = lambda: memorization(rng, V, L, is_training, kv_map)
    else:
        raise ValueError(f"unknown MAD task {task!r}; pick one of tasks.mad.settings.TASKS")
    pairs = [fn() for _ in range(n)]
    return (np.stack([p[0] for p in pairs]).astype(np.int16),
            np.stack([p[1] for p in pairs]).astype(np.int16))


def generate_split(setting: dict, split: str, seed: int, n: int | None = None
                   ) -> dict[str, np.ndarray]:
    """All `n` examples of one split of one MAD setting: {'inputs': [n, T], 'targets': [n, T]}.

    A pure function of (setting, split, seed): same arguments, same arrays (int16 to keep the
    cache small; every MAD vocabulary fits).
    """
    from tasks.synthetic_common.cache import split_seed
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if n is None:
        n = setting["num_train_examples"] if split == "train" else setting["num_test_examples"]
    rng = np.random.default_rng(split_seed(seed, split))
    x, y = _generate_instances(setting["task"], setting, n, rng, is_training=(split == "train"))
    return {"inputs": x, "targets": y}


# ---- the framework's datamodule (conf/task/mad.yaml) ----
class MADDataModule(TrainTestDataModule):
    """Generates (once, cached on disk) and streams one MAD setting. `num_train`/`num_test`
    replace the protocol sizes, `max_train` caps the training size (smoke profile: memorization
    keeps its 256 examples); `copy_pre_fix` copies 16 tokens in every selective-copying setting
    (mad-lab before its 2024-12-09 fix, settings.PRE_FIX_COPY_TOKENS); `data_path` overrides the
    cache directory; `eval_batch_size` batches the test set (None: batch_size). As in mad-lab the test
    set doubles as the validation set (early stopping and the per-epoch accuracy use it)."""
    name = "mad"

    def __init__(self, mad_task: str, setting: str = "baseline", batch_size: int = 128,
                 num_train: int | None = None, num_test: int | None = None,
                 max_train: int | None = None, seed: int = 0, data_path: str | None = None,
                 num_workers: int = 0, copy_pre_fix: bool = False,
                 eval_batch_size: int | None = None):
        super().__init__(batch_size, seed, data_path, num_workers, eval_batch_size)
        self.setting = resolve_setting(mad_task, setting, num_train, num_test, max_train,
                                       copy_pre_fix)

    @staticmethod
    def in_protocol(mad_task: str, setting: str = "baseline", **_) -> bool:
        """False for a setting id of another task (a Cartesian sweep point the protocol does not
        have): `make plan` leaves it out, as the run itself skips it (NotInProtocol)."""
        try:
            find_setting(mad_task, setting)
        except NotInProtocol:
            return False
        except ValueError:  # an unknown id: the run itself names it
            pass
        return True

    def cache_key(self, split):
        return {k: v for k, v in self.setting.items() if k != "varied"}

    def vocab_and_length(self):
        return self.setting["vocab_size"], self.setting["seq_len"]

    def generate(self, split):
        return generate_split(self.setting, split, self.seed)
