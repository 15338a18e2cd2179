"""MAD plugged into the experiment framework (tasks/INTERFACE.md): datamodule, objective, model.

Config keys (conf/task/mad.yaml): `task.mad_task` (one of tasks.mad.settings.TASKS) and
`task.setting` (an id from `setting_id`, e.g. baseline, V32, L256, N6400, noise0.4, copy32).
As in mad-lab the test set doubles as the validation set: early stopping (task.stop_at) and the
per-epoch accuracy are measured on the 1,280 test examples.
"""
from __future__ import annotations

from tasks.common.errors import ConfigError
from tasks.common.objective import TokenClassification
from tasks.synthetic_common.datamodule import TrainTestDataModule
from tasks.synthetic_common.models import MADAutoEncoder, MADLanguageModel

from .data import generate_split
from .settings import find_setting


def resolve_setting(mad_task: str, setting: str, num_train: int | None = None,
                    num_test: int | None = None, max_train: int | None = None) -> dict:
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
    return s


class MADDataModule(TrainTestDataModule):
    """Generates (once, cached on disk) and streams one MAD setting. `num_train`/`num_test`
    replace the protocol sizes, `max_train` caps the training size (smoke profile: memorization
    keeps its 256 examples); `data_path` overrides the cache directory."""
    name = "mad"

    def __init__(self, mad_task: str, setting: str = "baseline", batch_size: int = 128,
                 num_train: int | None = None, num_test: int | None = None,
                 max_train: int | None = None, seed: int = 0, data_path: str | None = None,
                 num_workers: int = 0):
        super().__init__(batch_size, seed, data_path, num_workers)
        self.setting = resolve_setting(mad_task, setting, num_train, num_test, max_train)

    def cache_key(self, split):
        return {k: v for k, v in self.setting.items() if k != "varied"}

    def generate(self, split):
        return generate_split(self.setting, split, self.seed)


class MADObjective(TokenClassification):
    """Cross-entropy over scored positions; metrics `acc` (macro, MAD's) and `acc_micro`."""

    def __init__(self, mad_task: str, setting: str = "baseline"):
        super().__init__(num_classes=resolve_setting(mad_task, setting)["vocab_size"])


def build_mad_model(mixer, *, mad_task: str, setting: str = "baseline", d_model: int = 128,
                    n_layers: int = 2, n_heads: int = 16, causal: bool = True, **_generic):
    """MAD backbone for `mixer` (a MixerSpec): the auto-encoder for compression, else the LM.

    `_generic` swallows the generic backbone keys (mlp, norm, ...) that conf/backbone/mad.yaml
    sets for SequenceBackbone; the MAD architecture here is fixed by the protocol.
    """
    vocab = resolve_setting(mad_task, setting)["vocab_size"]
    factory = lambda d: mixer(d, n_heads, causal=causal)
    cls = MADAutoEncoder if mad_task == "compression" else MADLanguageModel
    return cls(vocab, factory, dim=d_model, n_mixers=n_layers)
