"""Carry finished runs over a changed step cap: `make carry [ARGS="--results-dir DIR --dry-run"]`.

    python -m tasks.common.carry [--results-dir results] [--dry-run]

A run's cap (trainer.max_steps / max_epochs) is part of its id, so raising a task profile's cap
(the convergence rule: the cap comes from the slowest row) makes every run of that task an older
config. Most of them never reached it: a run that ended by `threshold` or `plateau` under an lr
schedule that does not read the horizon (constant, inverse_sqrt) is the same computation under
any cap above the step where it stopped: the same data order, updates and validations, the same
stop. Such a run moves to its id under today's config: its stored config gets the new cap (the
only identity keys that differ), its run dir is renamed, and `carried` in the JSON says from
which id and cap and why. A run that ended AT its old cap (same lr rule) whose run dir still
holds checkpoints/last.ckpt is extended: the run dir takes the new id (the old JSON waits in it as
capped_at_<step>.json), so the next `make reproduce-<table>` resumes it to the new cap, the same
run as one trained there from the start (resume is exact). Every other run is left as it is and
named with the reason (ended at its cap with no checkpoint, a cosine or one-cycle schedule sized
to the cap, a lowered cap, any other key changed): it trains again. Nothing is overwritten;
`make rekey` first, if the id rules changed.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .provenance import composer, protocol_overrides
from .rekey import move, new_paths, results_cli, taken
from .state import STATE
from .store import (current_id, make_run_id, now, read_result, resolved_node, strip_identity,
                    write_json_atomic)

CAPS = ("trainer.max_steps", "trainer.max_epochs")
HORIZON_FREE = ("constant", "inverse_sqrt")  # module.make_lr_lambda: lr(s) never reads the total
ENDED_EARLY = ("threshold", "plateau")
AT_CAP = "ended at its cap: retrain at the new cap (no checkpoints/last.ckpt to continue from)"


def _flat(obj, prefix=""):
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in _flat(val, f"{prefix}{key}.").items()}
    return {prefix[:-1]: obj}


def _uncapped(v) -> bool:
    return v is None or int(v) < 0


def why_not(payload: dict, today: dict) -> tuple[str | None, dict]:
    """(None, {cap key: [old, new]}) when the run carries over to today's config `today`
    (resolved top-level nodes), else (the reason it does not, {})."""
    old, new = _flat(strip_identity(payload["config"])), _flat(strip_identity(today))
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if not changed:
        return "already today's config", {}
    if set(changed) - set(CAPS):
        return f"{', '.join(k for k in changed if k not in CAPS)} changed too: retrain", {}
    sched = (payload["config"].get("scheduler") or {}).get("name")
    if sched not in HORIZON_FREE:
        return f"its lr schedule ({sched}) is sized to the cap: retrain", {}
    for k in changed:  # a raised or removed cap; a lowered one could have cut the run
        a, b = old.get(k), new.get(k)
        if not _uncapped(b) and (_uncapped(a) or int(b) < int(a)):
            return f"{k} lowered ({a} -> {b}): retrain", {}
    caps = {k: [old.get(k), new.get(k)] for k in changed}
    if payload.get("stop_reason") == "cap":  # carry() extends it where its checkpoint is
        return AT_CAP, caps
    if payload.get("stop_reason") not in ENDED_EARLY:
        return f"ended by {payload.get('stop_reason')}: retrain", {}
    return None, caps


def _set(cfg: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for p in path:
        cfg = cfg[p]
    cfg[last] = value


def _extend(f: Path, d: dict, rdir: Path, new_dir: Path, new: Path, caps: dict,
            dry_run: bool) -> str:
    """A run that ended at its old cap with its checkpoint at hand: its run dir becomes the new
    id's, so the next `make reproduce-<table>` resumes it from last.ckpt to the new cap (resume is
    the same run: tests/framework/test_framework_resume.py); the old result JSON waits in that
    dir as capped_at_<step>.json. "" when done (it said so), else why it was not."""
    if taken(new, new_dir):
        return f"{new.stem} exists already"
    caps_text = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in caps.items())
    print(f"{'would extend' if dry_run else 'extend'} {f.parent.name}/{f.stem} -> {new.stem} "
          f"(ended at its cap, step {d.get('global_step')}; {caps_text}): the next "
          f"make reproduce-{f.parent.name} resumes it from its last.ckpt")
    if not dry_run:
        rdir.rename(new_dir)
        f.rename(new_dir / f"capped_at_{d.get('global_step')}.json")
        write_json_atomic(new_dir / STATE, {
            "state": "stopped", "stopped": f"{now()} (its cap raised: {caps_text})"})
    return ""


def carry(results: Path, dry_run: bool = False, compose_ctx=composer) -> list[tuple[Path, Path]]:
    """Move every result JSON under results/runs/ that carries over (why_not) to today's id."""
    moved, extended, others = [], [], []
    with compose_ctx() as compose:
        for f in sorted((results / "runs").rglob("*.json")):
            try:
                d = read_result(f)
                if (d.get("provenance") or {}).get("kind") != "protocol":
                    continue  # ad hoc: no protocol point to compose again
                cfg = compose(protocol_overrides(d["provenance"]))
                new_id = make_run_id(cfg)
                if new_id == current_id(d):
                    continue
                reason, caps = why_not(d, {k: resolved_node(cfg, k) for k in cfg})
            except Exception as e:  # noqa: BLE001  (not a result JSON, or a config from older code)
                print(f"warning: skip {f}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            if reason and reason.endswith("changed too: retrain"):
                others.append(f.stem)  # an older config in other keys: one count, make status
                continue
            new, rdir, new_dir = new_paths(f, d, new_id)
            last = rdir / "checkpoints" / "last.ckpt"
            if reason == AT_CAP and new_dir is not None and last.is_file():
                reason = _extend(f, d, rdir, new_dir, new, caps, dry_run)
                if not reason:
                    extended.append(f.stem)
                    continue
            if reason:
                print(f"keep {f.parent.name}/{f.stem}: {reason}")
                continue
            if taken(new, new_dir):
                print(f"warning: keep {f.name}: {new_id} exists already", file=sys.stderr)
                continue
            step = d.get("global_step")
            print(f"{'would carry' if dry_run else 'carry'} {f.parent.name}/{f.stem} -> {new_id} "
                  f"({d['stop_reason']} at step {step}; "
                  + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in caps.items()) + ")")
            if dry_run:
                continue
            for k, (_, b) in caps.items():
                _set(d["config"], k, b)
            d["carried"] = {
                "from": f.stem, "caps": caps,
                "why": (f"ended by {d['stop_reason']} at step {step}, below both caps; lr "
                        f"{d['config']['scheduler']['name']}: the same computation under the new cap"),
                "at": now()}
            assert current_id(d) == new_id, (f, new_id)  # only the caps differed
            moved.append((f, move(f, d, new_id)))
    if extended:
        print(f"{len(extended)} runs extended: train them with make reproduce-<table> (they resume)")
    if others:
        print(f"{len(others)} runs of an older config in other keys than the caps: left as they "
              f"are (make status; retrain them)")
    return moved


def main(argv=None) -> int:
    return results_cli(argv, __doc__, carry, "say what would be carried", "{n} runs carried over",
                       "dry run: nothing moved")


if __name__ == "__main__":
    sys.exit(main())
