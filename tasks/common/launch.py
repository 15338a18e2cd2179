"""Launchers (stub)."""
LAUNCHERS = ("local", "ray", "slurm")


def layout_error(launcher, gpus, runs_per_gpu, submit_only=False):
    if launcher not in LAUNCHERS:
        return f"unknown LAUNCHER={launcher}: use one of {', '.join(LAUNCHERS)}"
    return None
