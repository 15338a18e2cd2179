"""Config that reads like the protocol (issue 30 item 5): Figures 3 and 2 build zoology's and
seq_icl's models from their own backbone configs, and the synthetic and time-series profile files
keep one-line reasons (the measurements behind them live in docs/mad_cpu.md, docs/mqar_cpu.md,
docs/regbench_cpu.md and docs/timeseries.md)."""
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

CONF = Path(__file__).resolve().parents[2] / "conf"
PROFILES = sorted(p for stem in ("mad", "mqar", "regbench", "timeseries")
                  for p in (CONF / "task_profile").glob(f"{stem}_*.yaml"))
LONGEST_COMMENT = 5  # lines in a row: a file's header or a value's reason, never a lab notebook


def _choices(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", overrides, return_hydra_config=True)
    return cfg, cfg.hydra.runtime.choices


@pytest.mark.parametrize("profile", ["smoke", "cpu", "paper"])
@pytest.mark.parametrize("experiment,backbone,target", [
    ("fig3/mqar", "mqar", "tasks.mqar.model.build_mqar_model"),
    ("fig2/regbench", "regbench", "tasks.regbench.model.build_regbench_model")])
def test_synthetic_figures_build_from_their_own_backbone_config(experiment, backbone, target,
                                                                 profile):
    cfg, choices = _choices([f"experiment={experiment}", f"profile={profile}"])
    assert choices["backbone"] == backbone
    own = yaml.safe_load((CONF / "backbone" / f"{backbone}.yaml").read_text())
    assert own["_target_"] == cfg.backbone._target_ == target
    spec = yaml.safe_load((CONF / "experiment" / f"{experiment}.yaml").read_text())
    assert "_target_" not in spec.get("backbone", {})  # no borrowed backbone re-targeted


def _longest_comment_run(path: Path) -> int:
    run = longest = 0
    for line in path.read_text().splitlines():
        if line.startswith("# @package"):  # Hydra's directive, not a comment
            continue
        run = run + 1 if line.lstrip().startswith("#") else 0
        longest = max(longest, run)
    return longest


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_profile_files_keep_one_line_reasons_not_measurement_notes(path):
    assert _longest_comment_run(path) <= LONGEST_COMMENT, (
        f"{path.relative_to(CONF)}: a comment block of {_longest_comment_run(path)} lines; move "
        "the measurements to the area's docs page and keep a one-line reason with a pointer")
