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
        new = old.with_name(f"{new_id}.json")
        rdir = Path(payload.get("run_dir") or "")
        new_dir = rdir.with_name(new_id) if rdir.name == old.stem else None
        if new.exists() or (new_dir is not None and new_dir.exists()):
            print(f"warning: keep {old.name}: {new_id} exists already", file=sys.stderr)
            continue
        print(f"{'would rename' if dry_run else 'rename'} {old.parent.name}/{old.stem} -> {new_id}")
        if dry_run:
            continue
        payload["run_id"] = new_id
        if new_dir is not None and rdir.is_dir():
            rdir.rename(new_dir)
            payload["run_dir"] = str(new_dir)
        write_json_atomic(new, payload)
        old.unlink()
        moved.append((old, new))
    return moved


def main(argv=None) -> int:
    ap = cli_parser(__doc__)
    ap.add_argument("--results-dir", type=Path, default=Path("results"))
    ap.add_argument("--dry-run", action="store_true", help="say what would be renamed")
    a = ap.parse_args(argv)
    if not (a.results_dir / "runs").is_dir():
        return fail(f"{a.results_dir / 'runs'} does not exist: pass --results-dir DIR "
                    "(the folder holding runs/)")
    n = len(rekey(a.results_dir, a.dry_run))
    print(f"{n} runs renamed" if not a.dry_run else "dry run: nothing renamed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
