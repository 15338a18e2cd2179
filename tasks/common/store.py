"""The results store, the bottom of the results pipeline (store -> protocol -> tables -> figures
-> the commands reproduce / status / plan / verdicts / rekey; each imports only the ones before
it): where results live (the repository root and `$ZEROS_ROOT/results`, defined here once), run
identity (deterministic id -> resumable sweeps), git facts, the result JSON's atomic writer and
its reader."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[2]  # the repository
CONF = ROOT / "conf"


def conf_dirs() -> list[Path]:
    """The config folders, first match wins: the repository's conf/, then each folder of
    $ZEROS_CONF_PATH (os.pathsep-separated, as PYTHONPATH): a task kept outside the repository
    brings its own conf/-shaped folder (tasks/INTERFACE.md, "Adding a task: the files")."""
    extra = os.environ.get("ZEROS_CONF_PATH", "")
    return [CONF, *(Path(p).resolve() for p in extra.split(os.pathsep) if p)]


def conf_file(rel: str) -> Path:
    """conf/<rel> in the first config folder that has it (the repository's conf/ if none does)."""
    return next((d / rel for d in conf_dirs() if (d / rel).exists()), CONF / rel)


def conf_glob(rel: str, pattern: str) -> list[Path]:
    """Every path matching conf/<rel>/<pattern> over the config folders (a name once: the first)."""
    found: dict[str, Path] = {}
    for d in conf_dirs():
        for p in sorted((d / rel).glob(pattern)) if (d / rel).is_dir() else []:
            found.setdefault(str(p.relative_to(d / rel)), p)
    return list(found.values())


def searchpath_overrides() -> list[str]:
    """Hydra's override that adds $ZEROS_CONF_PATH's folders to the search path (after conf/),
    for every compose of the framework (tasks/train.py, provenance.composer, plan); none unset."""
    extra = conf_dirs()[1:]
    return [f"hydra.searchpath=[{','.join(f'file://{d}' for d in extra)}]"] if extra else []


def zeros_root() -> Path:
    """Where runs put their outputs/ and results/: $ZEROS_ROOT, else the repository."""
    return Path(os.environ.get("ZEROS_ROOT", ROOT))


def results_root() -> Path:
    return zeros_root() / "results"


def reference_root(results_dir: Path) -> Path:
    """results/reference/ next to the user's results, else the repository's committed one."""
    own = Path(results_dir) / "reference"
    return own if own.is_dir() or Path(results_dir) == ROOT / "results" else \
        ROOT / "results" / "reference"

# THE one list of settings that cannot change what is trained or evaluated: they are left out of
# the run id (so a logging/path change finds the same finished run) and a table accepts a run that
# overrides them (tasks/common/provenance.py). Everything else in the resolved config counts
# (gradient clipping, accumulation, limit_*_batches, max_steps, ...): any change is a new run.
NON_IDENTITY_TOP = ("paths", "logger", "wandb", "hydra", "skip_existing", "resume", "run_id",
                    "compile", "checkpoint_every_n_steps", "expected_minutes",
                    "mixers", "backbones",  # every profile's rows: the run's own is `mixer`/`backbone`
                    "mad_tasks",  # every profile's MAD tasks: the run's own is `task.mad_task`
                    "mad_column")  # MAD's Table 1 column label (conf/mad_task/): meta holds it
NON_IDENTITY_KEYS = ("trainer.enable_progress_bar", "trainer.enable_model_summary",
                     "trainer.log_every_n_steps",
                     "task.heuristic")  # the line drawn in plots and tables: nothing trained
# where data files live, not what they hold (data_dir, data.path, cache_dir, ...), and loader workers
_VOLATILE = re.compile(r"^(path|dir|num_workers)$|_(path|dir)$")
# expected wall times (`minutes` tables older configs stored): a new measurement is no new run
_ESTIMATES = re.compile(r"^minutes$")
# keys that older configs stored and today's no longer hold (Figure 2's `automata: N<n>` key and
# `regbench_sizes` table, now the conf/automata/ group; the lookup tables that became config
# groups: MQAR's lengths, conf/length/; the per-row tables, conf/row_model/ and row_profile/;
# MAD's columns and heuristics, conf/mad_task/): left out of the id so that a finished run keeps
# the id of today's config that trains the same thing (`make rekey` renames by this rule)
RETIRED_KEYS = ("automata", "regbench_sizes", "task.smoke_num_train", "mqar_lengths",
                "mqar_rows", "regbench_rows", "regbench_row", "table4_rows",
                "mad_columns", "mad_heuristics",
                # the task profiles' lookup tables (issue 30): each MAD task's cap is now
                # conf/mad_task_profile/, the cpu minutes conf/estimates.yaml. Hashed whole, a
                # new cap for one MAD task had moved every MAD run's id; what they decided for a
                # run is hashed where it resolved (trainer.max_steps)
                "mad_cpu", "mqar_cpu", "regbench_cpu", "timeseries_cpu")
# plain keys that became config groups, key -> group (MAD's task, swept as task.mad_task=<task>
# before conf/mad_task/ held its column and heuristic): a finished run's recorded sweep point
# names the key and is recomposed by the group (provenance.protocol_overrides); a run that sets
# the key apart from its group is refused (validate.check_config)
KEYS_NOW_GROUPS = {"task.mad_task": "mad_task"}


@functools.lru_cache(maxsize=65536)  # planning a grid asks the same keys for every point
def is_non_identity(key: str) -> bool:
    """True for a dotted config key (an override's key) that leaves the run id unchanged."""
    key = key.lstrip("+~")
    if key.split(".")[0] in NON_IDENTITY_TOP or any(key == k or key.startswith(k + ".")
                                                     for k in NON_IDENTITY_KEYS):
        return True
    return any(_VOLATILE.search(part) or _ESTIMATES.search(part) for part in key.split("."))


def resolved_node(cfg: DictConfig, key: str):
    """One top-level node, resolved in place (interpolations reach the whole config, e.g.
    paths.data_dir); plain Python values."""
    node = cfg[key]
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def identity(cfg: DictConfig) -> dict:
    """The resolved config minus the non-identity and retired keys: what the run id hashes."""
    return strip_identity({k: resolved_node(cfg, k) for k in cfg if k not in NON_IDENTITY_TOP})


def strip_identity(resolved: dict) -> dict:
    """The identity part of a resolved config's top-level nodes (the non-identity keys out)."""
    def strip(obj, prefix):
        if isinstance(obj, dict):  # keys as str: a result JSON stores {96: ..} as {"96": ..}
            return {str(k): strip(v, f"{prefix}{k}.") for k, v in obj.items()
                    if not is_non_identity(f"{prefix}{k}") and f"{prefix}{k}" not in RETIRED_KEYS}
        if isinstance(obj, list):
            return [strip(v, prefix) for v in obj]
        return obj
    return strip({k: v for k, v in resolved.items() if k not in NON_IDENTITY_TOP}, "")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", text).strip("-")


def table_name(cfg) -> str:
    """cfg: a composed config, or its resolved top-level nodes (plan.py) as well."""
    return str(cfg["meta"]["table"]) if cfg["meta"].get("table") else "adhoc"


def make_run_id(cfg: DictConfig) -> str:
    if cfg.get("run_id"):
        return slug(str(cfg.run_id))
    return run_id_of({k: resolved_node(cfg, k) for k in cfg if k not in NON_IDENTITY_TOP})


def run_id_of(resolved: dict) -> str:
    """make_run_id from the resolved top-level nodes (tasks/common/plan.py resolves each node
    once per distinct value of what it depends on); `run_id` unset."""
    digest = hashlib.sha1(json.dumps(strip_identity(resolved), sort_keys=True, default=str)
                          .encode()).hexdigest()[:8]
    m, o = resolved["meta"], resolved["optimizer"]
    readable = (f"{m['row']}__{m['column']}__{m['setting']}__lr{float(o['lr']):g}"
                f"_wd{float(o['weight_decay']):g}_s{resolved['seed']}__{resolved['profile']['name']}")
    return f"{slug(readable)}-{digest}"


def cell_of(run_id: str) -> str:
    """A make_run_id id without its config hash: the run's row, task, setting, lr, wd, seed and
    profile ("...__s0__smoke-1a2b3c4d" -> "...__s0__smoke"); a user-given run_id is its own."""
    head = str(run_id).rsplit("-", 1)[0]
    return head if "__" in head else str(run_id)


def profile_of_id(run_id: str) -> str | None:
    """The profile a make_run_id id ends with ("...__smoke-1a2b3c4d" -> "smoke"); None for a
    user-given run_id."""
    cell = cell_of(run_id)
    return cell.rsplit("__", 1)[1] if "__" in cell else None


def current_id(payload: dict) -> str:
    """The id a finished run's result JSON would get under today's id rules, from the config it
    stored (rekey and the status reference line both ask this)."""
    return make_run_id(OmegaConf.create(payload["config"]))


def result_path(cfg, run_id: str, adhoc: bool = False) -> Path:
    """results/runs/<table>/<id>.json; an ad-hoc run of a table (not its protocol, see
    provenance.py) goes to results/runs/adhoc/<table>/<id>.json so that no table reads it."""
    runs = Path(cfg["paths"]["results_dir"]) / "runs"
    if adhoc and table_name(cfg) != "adhoc":
        runs = runs / "adhoc"
    return runs / table_name(cfg) / f"{run_id}.json"


def run_dir(cfg, run_id: str) -> Path:
    return Path(cfg["paths"]["log_dir"]) / "runs" / table_name(cfg) / run_id


def git_info(cwd: str | Path = ".") -> dict:
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "HEAD") or None
    return {"git_commit": commit, "git_dirty": bool(git("status", "--porcelain")) if commit else None}


def now() -> str:
    """UTC, to the second: every time stamp the framework writes (result, state, claim, carry)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, payload: dict) -> None:
    """Every JSON the framework writes (result, state.json, claim.json): a temp file beside it
    (same filesystem; not *.json, so no reader globs it), fsync, then rename: a crash leaves
    either no file or the whole file, never half of one, and a reader never sees a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_result(path: Path) -> dict:
    """The result JSON as a dict; ValueError (one line, names the file) when it does not read."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(d, dict) or "metrics" not in d:
        raise ValueError(f"{path}: not a run result (no 'metrics')")
    return d


def is_finished(path: Path) -> bool:
    """For skip_existing: a result JSON that does not read back is a run still to do."""
    if not Path(path).exists():
        return False
    try:
        read_result(path)
        return True
    except ValueError as e:
        print(f"warning: {e}: training this run again", flush=True)
        return False
