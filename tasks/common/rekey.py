"""Re-derive run ids after the identity rules change: `make rekey [ARGS=--dry-run]`.

    python -m tasks.common.rekey [--results-dir results] [--dry-run]

A run id hashes the resolved config minus the non-identity keys (store.NON_IDENTITY_*). When
those rules change (e.g. a key that only labels plots stops counting), finished runs would no
longer be found as finished and would train again. Each result JSON stores the resolved config it
ran with, so its id under the current rules can be recomputed: the JSON and its run dir
(checkpoints, logs, state.json) are renamed to it. Nothing is overwritten: a run whose new id is
taken already is left as it is and named in one line.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .errors import cli_parser, fail
from .store import current_id, write_json_atomic


def new_paths(old: Path, payload: dict, new_id: str) -> tuple[Path, Path, Path | None]:
    """(the JSON under new_id, the run dir, the run dir's new name: None where the run dir is not
    named by the old id and so stays)."""
    rdir = Path(payload.get("run_dir") or "")
    return (old.with_name(f"{new_id}.json"), rdir,
            rdir.with_name(new_id) if rdir.name == old.stem else None)


def taken(new: Path, new_dir: Path | None) -> bool:
    return new.exists() or (new_dir is not None and new_dir.exists())


def move(old: Path, payload: dict, new_id: str) -> Path:
    """Write the run under new_id, its run dir renamed along, then drop the old JSON (the caller
    checked `taken` first: nothing is overwritten). rekey and carry both move runs this way."""
    new, rdir, new_dir = new_paths(old, payload, new_id)
    payload["run_id"] = new_id
    if new_dir is not None and rdir.is_dir():
        rdir.rename(new_dir)
        payload["run_dir"] = str(new_dir)
    write_json_atomic(new, payload)
    old.unlink()
    return new


def rekey(results: Path, dry_run: bool = False) -> list[tuple[Path, Path]]:
    """Rename every result JSON under results/runs/ (and its run dir) to its current id."""
    moved = []
    for old in sorted((results / "runs").rglob("*.json")):
        try:
            payload = json.loads(old.read_text())
            new_id = current_id(payload)
        except Exception as e:  # noqa: BLE001  (not a result JSON, or a config from older code)
            print(f"warning: skip {old}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        if new_id == old.stem:
            continue
        new, _, new_dir = new_paths(old, payload, new_id)
        if taken(new, new_dir):
            print(f"warning: keep {old.name}: {new_id} exists already", file=sys.stderr)
            continue
        print(f"{'would rename' if dry_run else 'rename'} {old.parent.name}/{old.stem} -> {new_id}")
        if not dry_run:
            moved.append((old, move(old, payload, new_id)))
    return moved


def results_cli(argv, doc: str, act, dry_help: str, done: str, dry_done: str) -> int:
    """The command line of rekey and carry: `--results-dir DIR [--dry-run]`, one line and exit 2
    without DIR/runs, then `done` with the count of runs act(DIR, dry_run) moved (`dry_done`
    after a dry run)."""
    ap = cli_parser(doc)
    ap.add_argument("--results-dir", type=Path, default=Path("results"))
    ap.add_argument("--dry-run", action="store_true", help=dry_help)
    a = ap.parse_args(argv)
    if not (a.results_dir / "runs").is_dir():
        return fail(f"{a.results_dir / 'runs'} does not exist: pass --results-dir DIR "
                    "(the folder holding runs/, e.g. results/reference)")
    n = len(act(a.results_dir, a.dry_run))
    print(dry_done if a.dry_run else done.format(n=n))
    return 0


def main(argv=None) -> int:
    return results_cli(argv, __doc__, rekey, "say what would be renamed", "{n} runs renamed",
                       "dry run: nothing renamed")


if __name__ == "__main__":
    sys.exit(main())
