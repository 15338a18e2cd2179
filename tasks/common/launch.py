"""Launchers: the engines that run a table's job list (tasks/common/plan.py). Each gets Tasks
(a command, its environment, a log file) and returns one (name, exit code, log path) per task.

- local: processes on this machine. Without GPUs, `slots` at once (`--jobs N`) with
  cpu_count/N threads each; with GPUs, `runs_per_gpu` processes per GPU, each pinned to its GPU
  through CUDA_VISIBLE_DEVICES.
- ray: Ray tasks with num_gpus=1/K, so Ray packs K runs per GPU and sets each task's
  CUDA_VISIBLE_DEVICES; a cluster through RAY_ADDRESS (else a local Ray on this machine).
- slurm: submitit (the package of conf/hydra/launcher/slurm.yaml), one array task per K runs,
  the K runs sharing the task's GPU. cluster="local" is submitit's local executor (tests).
Every run claims its run id itself (claim.py), so an engine's retry never trains a run twice.
"""
from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import interrupt
from .store import ROOT

LAUNCHERS = ("local", "ray", "slurm")


@dataclass
class Task:
    name: str                # run id (or a stub's name in tests)
    cmd: list[str]
    log: Path
    env: dict = field(default_factory=dict)
    gpus: int = 0            # whole GPUs the run takes (DDP); 0: a 1/K share of one


def visible_gpus() -> int:
    try:
        import torch
        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


def layout_error(launcher: str, gpus: int | None, runs_per_gpu: int | None,
                 submit_only: bool = False) -> str | None:
    """One line naming the fix, or None. submit_only: planning (nothing is started)."""
    if launcher not in LAUNCHERS:
        return f"unknown LAUNCHER={launcher}: use one of {', '.join(LAUNCHERS)}"
    if runs_per_gpu is not None and runs_per_gpu < 1:
        return f"RUNS_PER_GPU={runs_per_gpu}: use 1 or more runs per GPU"
    if gpus is not None and gpus < 0:
        return f"GPUS={gpus}: use 0 (CPU) or more GPUs"
    if submit_only:
        return None
    if launcher == "local" and gpus:
        have = visible_gpus()
        if gpus > have:
            return (f"GPUS={gpus} but this machine shows {have} CUDA GPU(s): use GPUS={have} or "
                    "fewer, or LAUNCHER=ray / LAUNCHER=slurm to use other machines")
    if launcher == "ray":
        if not _has_ray():  # found, not imported: a local Ray reads its env at import
            return ("LAUNCHER=ray needs Ray: pip install -c constraints.txt -e '.[ray]' "
                    "(make install installs it)")
        return ray_address_error(os.environ.get("RAY_ADDRESS"))
    if launcher == "slurm":
        try:
            import submitit  # noqa: F401
        except ImportError:
            return "LAUNCHER=slurm needs submitit: make install"
    return None


def _has_ray() -> bool:
    import importlib.util  # find_spec answers from sys.modules first (None there: not found)
    return importlib.util.find_spec("ray") is not None


def ray_address_error(address: str | None, timeout: float = 5.0) -> str | None:
    """A RAY_ADDRESS whose host:port does not accept a connection: say so before Ray waits on it."""
    if not address or address == "auto" or address == "local":
        return None
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return f"RAY_ADDRESS={address}: use host:port (or ray://host:port), e.g. 10.0.0.1:6379"
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        return (f"RAY_ADDRESS={address} does not answer ({e.strerror or e}): start the cluster "
                "(`ray start --head` there) or unset RAY_ADDRESS to run a local Ray")
    return None


# exec the command with PR_SET_PDEATHSIG=SIGKILL (Linux): it dies with the thread that started
# it, as a Ray task's run must die with its killed worker (else the orphan trains on, holding the
# claim, while Ray's retry skips the run). argv: the parent's pid, then the command.
_DIE_WITH_PARENT = ("import ctypes, os, signal, sys\n"
                    "try:\n    ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
                    "except (AttributeError, OSError):\n    pass\n"
                    "if os.getppid() != int(sys.argv[1]):\n    sys.exit(137)\n"
                    "os.execvp(sys.argv[2], sys.argv[2:])")


def run_task(task: Task, extra_env: dict | None = None, echo=None,
             die_with_parent: bool = False) -> int:
    """Run one task's command, its output to its log (and `echo(line)` per line); exit code.
    die_with_parent: the command is SIGKILLed if this process dies (Linux; elsewhere a no-op)."""
    task.log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **task.env, **(extra_env or {}), "PYTHONUNBUFFERED": "1"}
    cmd = task.cmd
    if die_with_parent and sys.platform.startswith("linux"):
        cmd = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *cmd]
    # line-buffered: a worker killed mid-run keeps in the log what its run printed
    with open(task.log, "a", buffering=1) as log, subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1, start_new_session=True) as proc:
        interrupt.adopt(proc)  # the driver's signal handler passes a stop on to it
        try:
            for line in proc.stdout:
                log.write(line)
                if echo:
                    echo(line.rstrip("\n"))
            return proc.wait()
        finally:
            interrupt.release(proc)


def run_local(tasks: list[Task], slots: int, gpus: int = 0, runs_per_gpu: int = 1,
              on_start=None, on_end=None, echo=None) -> list[tuple[str, int, Path]]:
    """`slots` at once (CPU), or gpus x runs_per_gpu at once, each pinned to its GPU."""
    from concurrent.futures import ThreadPoolExecutor
    ids = [str(g) for _ in range(runs_per_gpu) for g in range(gpus)] if gpus else [None] * slots
    slots, lanes = len(ids), queue.Queue()
    for gpu in ids:
        lanes.put(gpu)
    # the cores shared out, unless the caller set OMP_NUM_THREADS: two drivers side by side
    # (OMP_NUM_THREADS=1, --jobs 1 each) got 2 threads a run on 2 cores, 4-8x slower per step
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // slots))
    results = []
    lock = threading.Lock()

    def one(task):
        gpu = lanes.get()
        env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        on_start and on_start(task)
        try:
            rc = run_task(task, env, echo=(lambda line: echo(task, line)) if echo else None)
        finally:
            lanes.put(gpu)
        with lock:
            results.append((task.name, rc, task.log))
        on_end and on_end(task, rc)
    with ThreadPoolExecutor(max_workers=slots) as pool:
        list(pool.map(one, tasks))
    return results


def ray_start(num_gpus: int | None = None, num_cpus: int | None = None):
    """Connect to RAY_ADDRESS, or start a local Ray on 127.0.0.1 (num_gpus: GPUs it declares)."""
    address = os.environ.get("RAY_ADDRESS")
    # before Ray is imported: no usage report; a local Ray on the loopback only (Ray reads
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER at import; without it Ray binds the outward interface)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not address:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray
    if ray.is_initialized():
        return ray
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_gpus=num_gpus, num_cpus=num_cpus, include_dashboard=False,
                 log_to_driver=False)
    return ray


def run_ray(tasks: list[Task], runs_per_gpu: int, gpus: int | None = None, on_end=None,
            cpus_per_run: float = 1.0) -> list[tuple[str, int, Path]]:
    """Each task a Ray task of num_gpus=1/K (or its whole GPUs), Ray pins it to its GPU.
    A task whose worker dies (killed, OOM, node lost) is submitted once more with
    ZEROS_CLAIM_WAIT_S: the retry waits for the killed attempt's claim to expire (at once on
    the same host: its run died with the worker) and resumes the run from its last checkpoint."""
    ray = ray_start(num_gpus=gpus)
    has_gpus = ray.cluster_resources().get("GPU", 0) > 0

    @ray.remote(max_retries=0)  # the driver retries (below): only it knows a retry is one
    def remote(task: Task, retry: bool):
        env = {"OMP_NUM_THREADS": str(max(1, int(cpus_per_run)))}
        if retry:  # the dead attempt's lease (claim.py), and a margin for the hosts' clocks
            lease = {**os.environ, **task.env}.get("ZEROS_CLAIM_LEASE_S") or 120
            env["ZEROS_CLAIM_WAIT_S"] = str(float(lease) + 30)
        return task.name, run_task(task, env, die_with_parent=True), task.log

    def submit(t: Task, retry: bool = False):
        opts = {"num_cpus": cpus_per_run}
        if has_gpus:
            opts["num_gpus"] = t.gpus or 1.0 / runs_per_gpu
        ref = remote.options(**opts).remote(t, retry)
        refs[ref] = (t, retry)
        return ref

    refs: dict = {}
    pending = [submit(t) for t in tasks]
    results = []
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            t, retried = refs[ref]
            try:
                res = ray.get(ref)
            except Exception as e:  # noqa: BLE001  (the worker died: no rc of the run)
                t.log.parent.mkdir(parents=True, exist_ok=True)
                with open(t.log, "a") as f:
                    f.write(f"ray: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                            f"{'' if retried else ' (retrying once: the run resumes)'}\n")
                if not retried:
                    pending.append(submit(t, retry=True))
                    continue
                res = (t.name, 1, t.log)
            results.append(res)
            on_end and on_end(t, res[1])
    return results


def _run_group(tasks: list[Task]) -> list[tuple[str, int, str]]:
    """One SLURM array task: its K runs at once on its GPU (whole-GPU runs one after another)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=len(tasks)) as pool:
        return list(pool.map(lambda t: (t.name, run_task(t), str(t.log)), tasks))


def run_slurm(tasks: list[Task], runs_per_gpu: int, folder: Path, cluster: str | None = None,
              params: dict | None = None, on_end=None) -> list[tuple[str, int, Path]]:
    """submitit: one array task per K runs (cluster=None: SLURM; "local": submitit's local
    executor). params: submitit's parameters (conf/hydra/launcher/slurm.yaml's values)."""
    import submitit
    ex = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    ex.update_parameters(**(params or {}))
    groups = [tasks[i:i + runs_per_gpu] for i in range(0, len(tasks), runs_per_gpu)]
    jobs = ex.map_array(_run_group, groups)
    results = []
    for job, group in zip(jobs, groups):
        try:
            out = job.result()
        except Exception as e:  # noqa: BLE001  (the array task itself failed: every run of it)
            out = [(t.name, 1, str(t.log)) for t in group]
            print(f"error: SLURM job {job.job_id} failed: {str(e).splitlines()[0]}",
                  file=sys.stderr)
        for (name, rc, log), t in zip(out, group):
            results.append((name, rc, Path(log)))
            on_end and on_end(t, rc)
    return results


def slurm_params(gpus_per_task: int = 1) -> dict:
    """submitit parameters from conf/hydra/launcher/slurm.yaml (the one place they live)."""
    from omegaconf import OmegaConf
    c = OmegaConf.load(ROOT / "conf" / "hydra" / "launcher" / "slurm.yaml")
    out = {"timeout_min": c.timeout_min, "gpus_per_node": gpus_per_task,
           "tasks_per_node": 1, "cpus_per_task": c.cpus_per_task, "mem_gb": c.mem_gb,
           "nodes": 1, "slurm_array_parallelism": c.array_parallelism}
    if c.get("partition"):
        out["slurm_partition"] = c.partition
    return out
