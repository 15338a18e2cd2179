"""Every bad value a user can type ends in ONE stderr line `error: ...` and exit 2, before any
data or model is built (tasks/common/validate.py). In-process through tasks.train.main() (fast),
plus one real subprocess for the whole path."""
from __future__ import annotations

import sys
import time

import pytest

from framework_helpers import TINY, run_cli

BAD = [  # (overrides, words the one line must contain)
    (["optimizer.lr=abc"], "optimizer.lr='abc' is not a number"),
    (["optimizer.lr=-1"], "optimizer.lr=-1 is out of range"),
    (["optimizer.weight_decay=-0.1"], "optimizer.weight_decay=-0.1 is out of range"),
    (["seed=1.5"], "seed=1.5 is not an integer"),
    (["trainer.max_steps=0"], "no training: trainer.max_steps=0"),
    (["trainer.limit_train_batches=0"], "no training: trainer.limit_train_batches=0"),
    (["trainer.max_steps=-1", "trainer.max_epochs=0"], "no training: trainer.max_epochs=0"),
    (["trainer.max_steps=-1", "trainer.max_epochs=-1"], "no end"),
    (["trainer.gradient_clip_val=-1"], "trainer.gradient_clip_val=-1 is out of range"),
    (["trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches=0 is out of range"),
    (["task.datamodule.batch_size=0"], "task.datamodule.batch_size=0 is out of range"),
    (["task.datamodule.batch_size=abc"], "is not an integer"),
    (["wandb.mode=onlin"], "unknown wandb.mode 'onlin'"),
    (["optimizer.lrr=1"], "unknown key optimizer.lrr"),
    (["optimizer.lr=("], "Error parsing override 'optimizer.lr=('"),
    (["experiment=table4/decoder", "task.datamodule.data_dir=/nonexistent/zeros"],
     "data folder /nonexistent/zeros (task.datamodule.data_dir) does not exist"),
    # the MAD task is a group (conf/mad_task/: its column and heuristic come with it)
    (["experiment=table1/mad", "task.mad_task=compression"],
     "task.mad_task=compression disagrees with mad_task=in-context-recall: choose it as "
     "mad_task=compression"),
    (["experiment=table1/mad", "mad_task=recall"], "unknown mad_task 'recall': use one of"),
]


def _main(argv, tmp_path, monkeypatch, capsys):
    """tasks.train.main() in-process; building a model or data fails the test."""
    import tasks.common.runner as runner
    import tasks.train as train

    def no_build(*a, **k):
        raise AssertionError("a model/data module was built before the error")
    monkeypatch.setattr(runner, "build", no_build)
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["tasks.train", *argv, "hydra/job_logging=none",
                                      "hydra/hydra_logging=none", "hydra.output_subdir=null"])
    with pytest.raises(SystemExit) as e:
        train.main()
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize("argv,words", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_value_is_one_line_exit_2_before_build(argv, words, tmp_path, monkeypatch, capsys):
    code, err = _main(argv, tmp_path, monkeypatch, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert words in lines[0]


def test_empty_data_dir_is_refused(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = _main(["experiment=table4/decoder", f"task.datamodule.data_dir={empty}",
                       "task.datamodule.download=false"], tmp_path, monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and f"data folder {empty}" in err and "empty" in err


@pytest.mark.parametrize("env,words", [
    ({}, "no W&B API key"),
    ({"WANDB_API_KEY": "x" * 40, "WANDB_BASE_URL": "http://127.0.0.1:9"}, "127.0.0.1:9 is unreachable"),
], ids=["no-key", "no-network"])
def test_wandb_online_without_key_or_network_names_offline(env, words, tmp_path, monkeypatch,
                                                           capsys):
    for k in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_IDENTITY_TOKEN_FILE", "HTTPS_PROXY",
              "https_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    t0 = time.time()
    code, err = _main(["wandb.mode=online"], tmp_path, monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and words in err
    assert "wandb.mode=offline" in err and time.time() - t0 < 10


@pytest.mark.parametrize("setting,words", [("V999", "use one of baseline, V32"),
                                           ("copy32", "has no setting copy32")])
def test_unknown_setting_of_a_single_run_is_exit_2(setting, words, tmp_path, monkeypatch, capsys):
    """The data module raises it (before the model): V999 exists nowhere; copy32 is a
    selective-copying id, which a multirun skips but a single run reports as a typo."""
    monkeypatch.setenv("ZEROS_ROOT", str(tmp_path))
    import tasks.train as train
    monkeypatch.setattr(sys, "argv", ["tasks.train", "experiment=table1/mad",
                                      f"task.setting={setting}", "hydra/job_logging=none",
                                      "hydra/hydra_logging=none", "hydra.output_subdir=null"])
    with pytest.raises(SystemExit) as e:
        train.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: ") and words in err


def test_cli_subprocess_bad_lr_one_line_exit_2_fast(tmp_path):
    t0 = time.time()
    r = run_cli([*TINY, "optimizer.lr=abc"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: optimizer.lr='abc'")
    assert time.time() - t0 < 60 and not (tmp_path / "outputs" / "runs").exists()


def test_bad_layer_argument_is_one_line_config_error():
    """A value the layer itself refuses (rope_style) is a ConfigError naming it, not a traceback."""
    import pytest
    from framework_helpers import compose
    from tasks.common.errors import ConfigError
    from tasks.common.runner import build
    with pytest.raises(ConfigError, match=r"rope_style.*\(mixer\.kwargs / backbone\)"):
        build(compose(["mixer=zeros", "+mixer.kwargs.rope_style=bogus"]), check_data=False)


CHECKS = ("check_before_run", "check_values", "check_config", "check_report")


def call_sites(root) -> dict[str, list[str]]:
    """Every call of a config check under `root`/tasks: {check: ["path:enclosing function"]}."""
    import ast
    sites = {name: [] for name in CHECKS}
    for path in sorted((root / "tasks").rglob("*.py")):
        def visit(node, where):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Call):
                    f = child.func
                    name = getattr(f, "id", None) or getattr(f, "attr", None)
                    if name in sites:
                        sites[name].append(f"{path.relative_to(root).as_posix()}:{where}")
                inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    else where
                visit(child, inner)
        visit(ast.parse(path.read_text()), "<module>")
    return sites


def test_each_config_check_runs_once_per_run():
    """tasks.train -> check_before_run -> check_values, check_config -> check_report and nowhere
    else (runner.build and the result writer used to check config and report a second time)."""
    from framework_helpers import REPO
    assert call_sites(REPO) == {
        "check_before_run": ["tasks/train.py:_hydra_main"],
        "check_values": ["tasks/common/validate.py:check_before_run"],
        "check_config": ["tasks/common/validate.py:check_before_run"],
        "check_report": ["tasks/common/validate.py:check_config"]}


@pytest.mark.parametrize("module", ["reproduce", "status", "verdicts", "curves", "tables"])
def test_bad_command_line_arguments_are_one_line_and_exit_2(module, capsys):
    """Every command's parser (errors.cli_parser): an unknown flag or an invalid --profile choice
    is one `error:` line naming the fix, not argparse's usage block plus an error line."""
    import importlib
    main = importlib.import_module(f"tasks.common.{module}").main
    table = [] if module == "verdicts" else ["table1"]  # verdicts read every table
    for argv in ([*table, "--profile", "gpu"], [*table, "--no-such-flag"]):
        try:
            code = main(argv)  # a command that checks the profile itself returns 2
        except SystemExit as e:  # argparse's checks exit
            code = e.code
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
        assert "gpu" in err[0] or "--no-such-flag" in err[0]
