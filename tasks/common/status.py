"""Run states and `make status TABLE=x [PROFILE=y]`: which runs of a table are finished, running,
failed or missing.

    python -m tasks.common.status table1 --profile smoke

A command of the results pipeline: the table's jobs from the plan (plan.py), each with its run
state (state.py), and how many committed reference runs are of today's config.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .errors import ConfigError, cli_parser, fail
from .plan import plan
from .protocol import experiment_files, missing_reason
from .provenance import older_config
from .store import profile_of_id, read_result, reference_root, results_root

ORDER = ("finished", "running", "failed", "missing")


def reference_files(table: str, profile: str, results_dir: Path) -> list[Path]:
    """The committed reference result JSONs of the table at the profile (an unreadable one: the
    profile its id ends with)."""
    ref_dir = reference_root(results_dir) / "runs" / table
    out = []
    for f in sorted(ref_dir.glob("*.json")) if ref_dir.is_dir() else []:
        try:
            keep = read_result(f).get("profile") == profile
        except Exception:  # noqa: BLE001
            keep = profile_of_id(f.stem) == profile
        out += [f] if keep else []
    return out


def reference_line(table: str, profile: str, results_dir: Path) -> str:
    """How many committed reference runs of the table/profile a run of today's config would
    reproduce (older_config)."""
    files = reference_files(table, profile, results_dir)
    if not files:
        return f"reference [{profile}]: no committed runs"
    total, fresh = len(files), len(files) - len(older_config(files))
    runs = f"{total} committed run{'s' if total > 1 else ''}"
    if fresh == total:
        return f"reference [{profile}]: {runs}, all of the current config"
    return (f"reference [{profile}]: {runs}, {fresh} of the current config; the "
            f"other {total - fresh} come from an older config (renew: make reproduce-{table} "
            f"PROFILE={profile} && make reference TABLE={table} PROFILE={profile})")


def main(argv=None) -> int:
    ap = cli_parser(__doc__)
    ap.add_argument("table")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("overrides", nargs="*", help="the extra overrides the sweep was run with")
    a = ap.parse_intermixed_args(argv)  # `make status` puts the overrides after --profile
    reason = missing_reason(a.table, a.profile)
    if reason:
        return fail(reason)
    try:  # every protocol job of the table (plan.py)
        jobs, _ = plan(a.table, a.profile, experiment_files(a.table), a.overrides)
    except ConfigError as e:  # a bad override, a table without rows at the profile
        return fail(e)
    for j in sorted(jobs, key=lambda j: ORDER.index(j.state)):
        print(f"{j.state:9s} {j.run_id}  {j.detail}".rstrip())
    counts = ", ".join(f"{sum(j.state == s for j in jobs)} {s}" for s in ORDER)
    print(f"{a.table} [{a.profile}]: {len(jobs)} runs: {counts}")
    print(reference_line(a.table, a.profile, results_root()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
