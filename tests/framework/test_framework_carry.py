"""tasks/common/carry.py: a run that stopped before its cap moves to its id under a raised cap,
and only such a run (the premise checked by training: the same run under two caps is the same)."""
from __future__ import annotations

import copy
import json
from contextlib import contextmanager

from job_helpers import TINY, clear_hydra, job_config
from omegaconf import OmegaConf
from test_framework_status import provenance_of, toy_jobs

from tasks.common import carry as C
from tasks.common.provenance import composer
from tasks.common.store import current_id, make_run_id

# a toy run that stops by plateau at its third validation (step 6), whatever its cap above 6
EARLY = ["logger=none", *TINY[1:], "scheduler=constant", "trainer.val_check_interval=2",
         "+task.converge={window: 2, tolerance: 100}"]


def _train(tmp_path, cap: int, extra=()) -> dict:
    """The result JSON of one in-process toy run (ad hoc: results/runs/adhoc/<id>.json)."""
    from tasks.common.runner import run
    cfg = job_config([*EARLY, f"trainer.max_steps={cap}", *extra], tmp_path / str(cap))
    try:
        run(cfg)
    finally:
        clear_hydra()
    return json.loads((tmp_path / "results" / "runs" / "adhoc" / f"{make_run_id(cfg)}.json").read_text())


def _same_run(a: dict, b: dict) -> bool:
    return a["history"] == b["history"] and a["metrics"] == b["metrics"]


def test_a_run_stopped_before_its_cap_is_the_same_run_under_a_higher_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    low, high = _train(tmp_path, 8), _train(tmp_path, 40)
    assert low["stop_reason"] == high["stop_reason"] == "plateau"
    assert low["global_step"] == high["global_step"] == 6
    assert _same_run(low, high)
    # the test can fail: a schedule sized to the cap (cosine) is another run under another cap
    cos = [_train(tmp_path, cap, ["scheduler=cosine"]) for cap in (8, 40)]
    assert cos[0]["global_step"] == cos[1]["global_step"] == 6 and not _same_run(*cos)


def _payload(stop="threshold", sched="constant", cap=100, **cfg_changes):
    cfg = {"trainer": {"max_steps": cap, "max_epochs": 1000}, "scheduler": {"name": sched},
           "optimizer": {"lr": 0.1}}
    for k, v in cfg_changes.items():
        cfg[k.split("__")[0]][k.split("__")[1]] = v
    return {"stop_reason": stop, "global_step": 50, "config": cfg}


def test_why_not_carries_only_an_early_stop_under_a_horizon_free_lr_and_a_raised_cap():
    today = _payload(cap=200)["config"]
    assert C.why_not(_payload(), today) == (None, {"trainer.max_steps": [100, 200]})
    inv = _payload(stop="plateau", sched="inverse_sqrt")
    assert C.why_not(inv, {**today, "scheduler": {"name": "inverse_sqrt"}})[0] is None
    assert C.why_not(_payload(), _payload(cap=-1)["config"])[0] is None  # the cap removed
    # ended at its cap: not the same run at the new cap (carry extends it from its checkpoint)
    assert C.why_not(_payload(stop="cap"), today) == (C.AT_CAP, {"trainer.max_steps": [100, 200]})
    refused = {"diverged": _payload(stop="diverged"),
               "cosine": _payload(sched="cosine"), "onecycle": _payload(sched="onecycle")}
    for name, p in refused.items():
        reason, caps = C.why_not(p, {**today, "scheduler": p["config"]["scheduler"]})
        assert reason and name in reason and caps == {}, name
    assert "lowered" in C.why_not(_payload(cap=300), today)[0]
    assert "lowered" in C.why_not(_payload(cap=-1), today)[0]
    assert "optimizer.lr changed too" in C.why_not(_payload(optimizer__lr=0.2), today)[0]
    assert C.why_not(_payload(cap=200), today)[0] == "already today's config"


def _stored(root, job, cfg, run_id, stop):
    """A result JSON (+ run dir) of the toy table, protocol provenance, this stored config."""
    rdir = root / "outputs" / "runs" / "toy" / run_id
    (rdir / "checkpoints").mkdir(parents=True)
    out = root / "results" / "runs" / "toy" / f"{run_id}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"run_id": run_id, "run_dir": str(rdir), "stop_reason": stop,
                               "global_step": 4, "provenance": provenance_of(job), "metrics": {},
                               "config": cfg, "history": [{"step": 4, "val/acc": 0.5}]}))
    return out, rdir


def test_carry_moves_an_early_stop_to_its_id_under_the_raised_cap_and_keeps_the_rest(
        tmp_path, capsys):
    (job0, _, _, _), (job1, _, _, _) = toy_jobs()
    # the runs' conf: the toy at a constant lr, validated every 10 steps (its smoke profile
    # validates at the cap, so a raised cap moves its validations too: not carried, below)
    then = ["scheduler=constant", "trainer.val_check_interval=10"]
    raised = [*then, "trainer.max_steps=100000"]  # "today's" conf: the cap raised

    @contextmanager
    def today(extra=raised):
        with composer() as compose:
            yield lambda ov, hydra=False: compose([*ov, *extra], hydra)

    with composer() as compose:
        cfg0, cfg1 = (OmegaConf.to_container(compose([*j, *then]), resolve=True)
                      for j in (job0, job1))
        new0 = make_run_id(compose([*job0, *raised]))
    early, rdir = _stored(tmp_path, job0, copy.deepcopy(cfg0), "early-old-id", "threshold")
    capped, _ = _stored(tmp_path, job1, cfg1, "capped-old-id", "cap")
    results = tmp_path / "results"
    smoke_raised = lambda: today(["trainer.max_steps=100000"])  # noqa: E731
    assert C.carry(results, compose_ctx=smoke_raised) == [] and early.exists()
    assert "2 runs of an older config in other keys" in capsys.readouterr().out
    assert C.carry(results, dry_run=True, compose_ctx=today) == [] and early.exists()
    moved = C.carry(results, compose_ctx=today)
    assert moved == [(early, early.with_name(f"{new0}.json"))] and not early.exists()
    d = json.loads(early.with_name(f"{new0}.json").read_text())
    assert d["run_id"] == new0 == current_id(d) and d["run_dir"].endswith(new0)
    assert d["carried"]["from"] == "early-old-id" and d["history"] == [{"step": 4, "val/acc": 0.5}]
    assert d["carried"]["caps"] == {"trainer.max_steps": [cfg0["trainer"]["max_steps"], 100000]}
    assert (rdir.with_name(new0) / "checkpoints").is_dir() and not rdir.exists()
    assert capped.exists()  # ended at its cap, no checkpoint: it trains again
    out = capsys.readouterr().out
    assert "keep toy/capped-old-id: ended at its cap: retrain at the new cap" in out
    assert C.carry(results, compose_ctx=today) == []  # idempotent: it is today's config now
    # never overwrites: a second copy of the early run finds its new id taken
    _stored(tmp_path / "again", job0, cfg0, "early-old-id", "threshold")
    again = tmp_path / "again" / "results"
    (again / "runs" / "toy" / f"{new0}.json").write_text("{}")
    assert C.carry(again, compose_ctx=today) == []
    assert "exists already" in capsys.readouterr().err


def test_carry_without_runs_is_one_line_exit_2(tmp_path, capsys):
    assert C.main(["--results-dir", str(tmp_path)]) == 2
    assert "pass --results-dir" in capsys.readouterr().err


def test_carry_extends_a_capped_run_with_its_checkpoint_to_resume_at_the_new_cap(tmp_path, capsys):
    from tasks.common.state import job_state
    (job0, _, _, _), _ = toy_jobs()
    then = ["scheduler=constant", "trainer.val_check_interval=10"]

    @contextmanager
    def today():
        with composer() as compose:
            yield lambda ov, hydra=False: compose([*ov, *then, "trainer.max_steps=100000"], hydra)

    with composer() as compose:
        cfg0 = OmegaConf.to_container(compose([*job0, *then]), resolve=True)
        new0 = make_run_id(compose([*job0, *then, "trainer.max_steps=100000"]))
    capped, rdir = _stored(tmp_path, job0, cfg0, "capped-old-id", "cap")
    (rdir / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    results = tmp_path / "results"
    assert C.carry(results, dry_run=True, compose_ctx=today) == [] and capped.exists()
    assert "would extend toy/capped-old-id -> " + new0 in capsys.readouterr().out
    assert C.carry(results, compose_ctx=today) == []
    new_dir = rdir.with_name(new0)
    assert not capped.exists() and not rdir.exists()
    assert (new_dir / "checkpoints" / "last.ckpt").read_bytes() == b"weights"
    assert json.loads((new_dir / "capped_at_4.json").read_text())["stop_reason"] == "cap"
    state, detail = job_state(results / "runs" / "toy" / f"{new0}.json", new_dir)
    assert state == "missing" and "resumes it from its last checkpoint" in detail  # trains next
    assert "1 runs extended" in capsys.readouterr().out
