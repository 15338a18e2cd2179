"""tasks/common/rekey.py: finished runs follow a change of the identity rules, never overwrite."""
from __future__ import annotations

import json

from omegaconf import OmegaConf

from tasks.common import rekey as rk
from tasks.common.store import make_run_id

from framework_helpers import compose


def _result(root, cfg, run_id):
    """A result JSON + run dir as runner.run writes them, under a (possibly stale) run id."""
    rdir = root / "outputs" / "runs" / "toy" / run_id
    (rdir / "checkpoints").mkdir(parents=True)
    out = root / "results" / "runs" / "toy" / f"{run_id}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"run_id": run_id, "run_dir": str(rdir),
                               "config": OmegaConf.to_container(cfg, resolve=True)}))
    return out, rdir


def test_rekey_renames_a_run_whose_id_rules_changed_and_keeps_taken_ids(tmp_path, capsys):
    cfg = compose(["experiment=toy/recall", "mixer=zeros"])
    new_id = make_run_id(cfg)
    old, rdir = _result(tmp_path, cfg, "a-stale-id")
    same, _ = _result(tmp_path, cfg, "b-stale-id")  # a second copy: its target is then taken
    assert rk.main(["--results-dir", str(tmp_path / "results"), "--dry-run"]) == 0
    assert old.exists()  # dry run: nothing moved
    moved = rk.rekey(tmp_path / "results")
    assert len(moved) == 1
    new = old.with_name(f"{new_id}.json")
    payload = json.loads(new.read_text())
    assert payload["run_id"] == new_id and payload["run_dir"].endswith(new_id)
    assert (rdir.with_name(new_id) / "checkpoints").is_dir() and not rdir.exists()
    assert same.exists() and "exists already" in capsys.readouterr().err  # never overwritten
    assert rk.rekey(tmp_path / "results") == []  # idempotent


def test_rekey_without_runs_is_one_line_exit_2(tmp_path, capsys):
    assert rk.main(["--results-dir", str(tmp_path)]) == 2
    assert "pass --results-dir" in capsys.readouterr().err


def test_labels_and_estimates_are_not_identity():
    base = make_run_id(compose(["experiment=toy/recall", "+est.minutes.x=1"]))
    assert make_run_id(compose(["experiment=toy/recall", "+est.minutes.x=2",  # a new estimate
                                "+task.heuristic.value=0.5", "+mixers.cpu=zeros",
                                "expected_minutes=3"])) == base
    assert make_run_id(compose(["experiment=toy/recall", "+est.minutes.x=1",
                                "optimizer.lr=0.5"])) != base  # the test can fail
