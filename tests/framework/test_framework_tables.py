"""The table protocol on hand-made result JSONs: best over the lr/wd grid per setting and seed,
mean over settings (or over setting groups), mean ± std over seeds, paper numbers and diffs."""
from __future__ import annotations

import json

import numpy as np
import pytest
from framework_helpers import squash

from tasks.common.protocol import TABLE_CONF, load_spec, runs_frame
from tasks.common.store import ROOT
from tasks.common.table import build_table, render_latex, render_markdown


def _write(root, table, row, column, setting, seed, lr, acc, profile="smoke"):
    d = root / "runs" / table
    d.mkdir(parents=True, exist_ok=True)
    rid = f"{row}_{column}_{setting}_{seed}_{lr}_{profile}"
    (d / f"{rid}.json").write_text(json.dumps({
        "run_id": rid, "table": table, "row": row, "column": column, "setting": setting,
        "seed": seed, "lr": lr, "weight_decay": 0.0, "profile": profile, "params": 1000,
        "metrics": {"best": {"test/acc": acc, "val/acc": acc}, "final": {"test/acc": acc / 2}},
        "history": [{"step": 1, "val/loss": 2.0}, {"step": 2, "val/loss": 1.0}]}))


SPEC = {"title": "T", "metric": "test/acc", "mode": "max", "scale": 100, "digits": 1,
        "columns": [{"key": "a", "label": "A"}, {"key": "b", "label": "B"}], "average": "Avg",
        "rows": ["M1", "M2"], "paper": {"M1": {"A": 50.0, "Avg": 40.0}, "M3": {"A": 1.0}}}


def test_protocol_best_grid_mean_settings_mean_std_seeds(tmp_path):
    # M1, column a: settings s1, s2; lrs 1e-3 (good) and 1e-2 (bad); seeds 0, 1
    for seed, (g1, g2) in enumerate([(0.6, 0.8), (0.4, 0.6)]):
        for setting, good in (("s1", g1), ("s2", g2)):
            _write(tmp_path, "t", "M1", "a", setting, seed, 1e-3, good)
            _write(tmp_path, "t", "M1", "a", setting, seed, 1e-2, good - 0.3)
        _write(tmp_path, "t", "M1", "b", "s1", seed, 1e-3, 0.2)
    _write(tmp_path, "t", "M2", "a", "s1", 0, 1e-3, 0.9)
    _write(tmp_path, "t", "M2", "a", "s1", 0, 1e-3, 0.1, profile="paper")  # other profile
    df = runs_frame(tmp_path, "t")
    long = build_table(df[df["profile"] == "smoke"], SPEC)
    cell = long.set_index(["row", "column"])
    # seed 0: mean(0.6, 0.8) = 0.7; seed 1: mean(0.4, 0.6) = 0.5 -> 60 ± std(70, 50)
    assert cell.loc[("M1", "A"), "ours"] == pytest.approx(60.0)
    assert cell.loc[("M1", "A"), "ours_std"] == pytest.approx(np.std([70, 50], ddof=1))
    assert cell.loc[("M1", "A"), "n_seeds"] == 2 and cell.loc[("M1", "A"), "n_settings"] == 2
    assert cell.loc[("M1", "A"), "diff"] == pytest.approx(10.0)
    # average over columns per seed: (70 + 20) / 2 = 45 and (50 + 20) / 2 = 35 -> 40
    assert cell.loc[("M1", "Avg"), "ours"] == pytest.approx(40.0)
    assert cell.loc[("M1", "Avg"), "diff"] == pytest.approx(0.0)
    assert cell.loc[("M2", "A"), "ours"] == pytest.approx(90.0)
    assert ("M2", "Avg") not in cell.index  # M2 lacks column B: no average
    assert np.isnan(cell.loc[("M3", "A"), "ours"]) and cell.loc[("M3", "A"), "paper"] == 1.0
    assert list(long["row"].unique()) == ["M1", "M2", "M3"]  # spec order, then the rest
    md = squash(render_markdown(long, SPEC, "smoke"))
    assert "| M1 | 60.0 ± 14.1 / 50.0 (+10.0) |" in md and "**smoke**" in md
    assert "60.0 (50.0)" in render_latex(long, SPEC, "smoke")


def test_group_sep_means_within_groups_first(tmp_path):
    for setting, acc in (("fuzzy_recall_baseline", 0.2), ("fuzzy_recall_V32", 0.4), ("memorize_baseline", 1.0)):
        _write(tmp_path, "t", "M1", "mad_avg", setting, 0, 1e-3, acc)
    spec = {"metric": "test/acc", "mode": "max", "scale": 100,
            "columns": [{"key": "mad_avg", "label": "MAD", "group_sep": "_"}]}
    long = build_table(runs_frame(tmp_path, "t"), spec)
    assert long.iloc[0]["ours"] == pytest.approx((30.0 + 100.0) / 2)  # not (20+40+100)/3


def test_column_settings_glob_keeps_one_task_of_a_column_and_notes_go_per_profile(tmp_path):
    # the ablation's In-Context / Noisy columns: one task of the MAD Avg runs ("recall_*" must
    # not catch "noisy_recall_*" or "fuzzy_recall_*")
    for setting, acc in (("recall_baseline", 0.8), ("recall_V32", 0.6), ("noisy_recall_baseline", 0.1),
                         ("fuzzy_recall_baseline", 0.3)):
        _write(tmp_path, "t", "M1", "mad_avg", setting, 0, 1e-3, acc)
    spec = {"metric": "test/acc", "mode": "max", "scale": 100, "note": {"cpu": "CPU NOTE"},
            "columns": [{"key": "mad_avg", "label": "MAD", "group_sep": "_"},
                        {"key": "mad_avg", "label": "IC", "settings": "recall_*"},
                        {"key": "mad_avg", "label": "Noisy", "settings": "noisy_recall_*"}]}
    df = runs_frame(tmp_path, "t")
    cell = build_table(df, spec).set_index("column")
    assert cell.loc["MAD", "ours"] == pytest.approx((70.0 + 10.0 + 30.0) / 3)
    assert cell.loc["IC", "ours"] == pytest.approx(70.0) and cell.loc["IC", "n_settings"] == 2
    assert cell.loc["Noisy", "ours"] == pytest.approx(10.0) and cell.loc["Noisy", "n_settings"] == 1
    # a per-profile note: shown for its profile only
    long = build_table(df, spec)
    assert "CPU NOTE" in render_markdown(long, spec, "cpu")
    assert "CPU NOTE" not in render_markdown(long, spec, "smoke")


def test_every_table_spec_loads_and_renders_without_runs(tmp_path):
    import pandas as pd

    for path in sorted(TABLE_CONF.glob("*.yaml")):
        spec = load_spec(path.stem)
        if spec.get("kind") == "figure":  # plot hook owned by its task; must name a function
            assert "." in spec["plot"], path
            continue
        long = build_table(pd.DataFrame(), spec)
        assert long["paper"].notna().all()
        assert spec["title"] in render_markdown(long, spec, "none")
    t1 = build_table(pd.DataFrame(), load_spec("table1")).set_index(["row", "column"])
    assert t1.loc[("ZeroS", "Avg"), "paper"] == 73.5


def test_column_values_take_a_seed_only_with_all_of_its_rows_settings(tmp_path):
    """A seed retrained on one of the column's two settings so far (seed 1 of M1: s1 only) would
    average over one task: it stays out of the cell until its other setting is in."""
    for setting, acc in (("s1", 0.6), ("s2", 0.8)):
        _write(tmp_path, "t", "M1", "a", setting, 0, 1e-3, acc)
    _write(tmp_path, "t", "M1", "a", "s1", 1, 1e-3, 0.99)  # seed 1: s2 not trained yet
    _write(tmp_path, "t", "M2", "a", "s1", 0, 1e-3, 0.5)  # a row with one setting at every seed
    _write(tmp_path, "t", "M2", "a", "s1", 1, 1e-3, 0.7)
    cell = build_table(runs_frame(tmp_path, "t"), SPEC).set_index(["row", "column"])
    assert cell.loc[("M1", "A"), "ours"] == pytest.approx(70.0) and cell.loc[("M1", "A"), "n_seeds"] == 1
    assert cell.loc[("M2", "A"), "ours"] == pytest.approx(60.0) and cell.loc[("M2", "A"), "n_seeds"] == 2


def _toy(root, name, row="ZeroS", acc=0.5, profile="smoke", **kw):
    from job_helpers import fake_result
    return fake_result(root / "runs" / "toy" / f"{name}.json", profile=profile, row=row,
                       acc=acc, **kw)


def test_empty_or_failed_attempt_never_replaces_an_existing_table(tmp_path, capsys):
    from tasks.common.tables import make
    _toy(tmp_path, "a", acc=0.6)
    (tmp_path / "reference").mkdir()  # else the repository's reference (store.reference_root)
    md = tmp_path / "tables" / "smoke" / "toy.md"
    assert make("toy", "smoke", tmp_path)["runs"] == 1
    assert "| ZeroS | 60.0 / 100.0" in squash(md.read_text())
    before = md.read_text()
    assert make("toy", "paper", tmp_path)["runs"] == 0  # a paper attempt with no finished run
    assert not (tmp_path / "tables" / "paper").exists()  # profiles never share a file
    (tmp_path / "runs" / "toy" / "a.json").unlink()
    assert make("toy", "smoke", tmp_path) == {"kept": str(md), "runs": 0}
    assert md.read_text() == before
    assert f"toy [smoke]: no runs in {tmp_path / 'runs' / 'toy'}/; kept {md}" in capsys.readouterr().out


def test_corrupted_json_is_named_in_one_line_and_the_rest_goes_on(tmp_path, capsys):
    from tasks.common.tables import main
    _toy(tmp_path, "good", acc=0.6)
    (tmp_path / "reference").mkdir()  # else the repository's reference (store.reference_root)
    bad = tmp_path / "runs" / "toy" / "x.json"
    bad.write_text('{"run_id": "x", "metr')
    (tmp_path / "runs" / "table1").mkdir(parents=True)
    (tmp_path / "runs" / "table1" / "y.json").write_text("")
    assert main(["toy", "table1", "--results-dir", str(tmp_path), "--profile", "smoke"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"warning: skip {bad}: not valid JSON (") and len(err) == 2
    md = squash((tmp_path / "tables" / "smoke" / "toy.md").read_text())
    assert "| ZeroS | 60.0 / 100.0 (-40.0) |" in md


def test_a_cell_with_a_run_of_an_older_config_carries_a_dagger(tmp_path):
    """A run that stored a config but no provenance (code before it) is of an older config
    (provenance.older_config): its cell, its row's average and the reference value it feeds carry
    †, the note and the sources line say so, the CSV has `older`; a bare hand-made JSON (neither
    config nor provenance) is not judged."""
    from tasks.common.tables import make
    _toy(tmp_path, "a", acc=0.6, config={"mixer": "old"})
    _toy(tmp_path, "b", row="Transformer", acc=0.3)
    _toy(tmp_path / "reference", "r", row="Transformer", acc=0.4, config={})
    make("toy", "smoke", tmp_path)
    md = squash((tmp_path / "tables" / "smoke" / "toy.md").read_text())
    assert "| ZeroS | 60.0 † / — / 100.0 (-40.0) |" in md
    assert "| Transformer | 30.0 / 40.0 † / 100.0 (-70.0) |" in md
    assert "- ours: 2 runs (1 of an older config †), profile smoke" in md
    assert "- reference: 1 runs (1 of an older config †)" in md
    assert "`make status TABLE=toy PROFILE=smoke` counts them" in md
    csv = (tmp_path / "tables" / "smoke" / "toy.csv").read_text().splitlines()
    assert "older" in csv[0].split(",") and "reference_older" in csv[0].split(",")
    (tmp_path / "runs" / "toy" / "a.json").unlink()
    make("toy", "smoke", tmp_path)
    md = (tmp_path / "tables" / "smoke" / "toy.md").read_text()
    assert md.count("†") == 3 and "(1 of an older config †)" in md  # the reference's cell, line, note


def test_table_shows_ours_reference_paper_and_where_the_runs_came_from(tmp_path):
    from tasks.common.tables import make
    _toy(tmp_path, "a", acc=0.6)
    _toy(tmp_path / "reference", "r1", acc=0.4)
    _toy(tmp_path / "reference", "r2", row="Transformer", acc=0.3, git_dirty=True)
    _toy(tmp_path / "reference", "r3", row="Transformer", acc=0.9, profile="paper")  # not smoke
    make("toy", "smoke", tmp_path)
    md = squash((tmp_path / "tables" / "smoke" / "toy.md").read_text())
    assert "| ZeroS | 60.0 / 40.0 / 100.0 (-40.0) |" in md
    assert "| Transformer | — / 30.0 / 100.0 (ref -70.0) |" in md  # ours missing: reference − paper
    assert "- ours: 1 runs, profile smoke, steps 50, seeds 0, commit abcdef1" in md
    assert "- reference: 2 runs, profile smoke, steps 50, seeds 0, commit abcdef1+dirty" in md
    csv = (tmp_path / "tables" / "smoke" / "toy.csv").read_text().splitlines()
    assert "reference" in csv[0] and "diff_of" in csv[0] and "steps" in csv[0]


def test_make_reference_replaces_the_cells_it_retrained_keeps_the_rest_or_refuses(tmp_path, capsys):
    from tasks.common.tables import main
    assert main(["toy", "--profile", "smoke", "--publish", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no protocol runs of toy at profile smoke")
    cell = "ZeroS__toy__V16_L9__lr0.003_wd0_s0__smoke"
    _toy(tmp_path, f"{cell}-0000000a", acc=0.6)
    _toy(tmp_path / "reference", f"{cell}-000000dd", acc=0.1)  # its cell, an older config: replaced
    _toy(tmp_path / "reference", "Transformer__toy__V16_L9__lr0.003_wd0_s0__smoke-000000ee",
         row="Transformer", acc=0.9)  # a cell the user did not retrain: kept
    assert main(["toy", "--profile", "smoke", "--publish", "--results-dir", str(tmp_path)]) == 0
    assert "'copied': 1, 'replaced': 1, 'others_kept': 1" in capsys.readouterr().out
    assert sorted(p.stem[-8:] for p in (tmp_path / "reference" / "runs" / "toy").glob("*")) == [
        "0000000a", "000000ee"]
    md = squash((tmp_path / "reference" / "tables" / "smoke" / "toy.md").read_text())
    assert "| ZeroS | 60.0 / 100.0 (-40.0) |" in md and "reference ± std" in md
    assert "| Transformer | 90.0 / 100.0" in md


def test_a_run_of_todays_config_supersedes_the_older_run_of_its_cell(tmp_path, capsys):
    """drop_superseded: the user's results hold an older run (it stored a config, no provenance:
    older_config) and a run of today's config (here unjudged) of the same cell: the table reads
    only today's (no best-over-lr pick of the better, older one; no †) and `make reference`
    copies only it; an older run alone in its cell stays (with its †)."""
    from tasks.common.tables import main, make
    from tasks.common.table import drop_superseded
    cell = "ZeroS__toy__V16_L9__lr0.003_wd0_s0__smoke"
    _toy(tmp_path, f"{cell}-0000000a", acc=0.6)
    _toy(tmp_path, f"{cell}-0000000b", acc=0.9, config={"old": True})
    _toy(tmp_path, "Transformer__toy__V16_L9__lr0.003_wd0_s0__smoke-0000000c", row="Transformer",
         acc=0.3, config={"old": True})
    (tmp_path / "reference").mkdir()
    assert make("toy", "smoke", tmp_path)["runs"] == 2
    md = squash((tmp_path / "tables" / "smoke" / "toy.md").read_text())
    assert "| ZeroS | 60.0 / 100.0 (-40.0) |" in md and "| Transformer | 30.0 † / 100.0" in md
    assert main(["toy", "--profile", "smoke", "--publish", "--results-dir", str(tmp_path)]) == 0
    assert "'copied': 2, 'replaced': 0, 'others_kept': 0, 'superseded': 1" in capsys.readouterr().out
    assert sorted(p.stem[-8:] for p in (tmp_path / "reference" / "runs" / "toy").glob("*")) == [
        "0000000a", "0000000c"]
    import pandas as pd
    df = pd.DataFrame({"run_id": [f"{cell}-1", f"{cell}-2", "x__y-3"], "older": [True, False, True]})
    assert list(drop_superseded(df)["run_id"]) == [f"{cell}-2", "x__y-3"]


def test_figure_hooks_write_per_profile(tmp_path):
    from tasks.common.tables import make
    for lr, acc in ((1e-3, 0.5), (1e-2, 0.7)):
        _write(tmp_path, "table4", "ZeroS", "ETTh1", "h96_L96", 0, lr, acc)
    info = make("table4", "smoke", tmp_path)
    assert info["runs"] == 2 and (tmp_path / "tables" / "smoke" / "table4.md").is_file()
    assert not list(tmp_path.glob(".plot-*"))  # the hook's scratch dir is gone


def test_make_tables_builds_every_profile_present_in_its_own_folder(tmp_path, capsys):
    from tasks.common.tables import main
    _toy(tmp_path, "s", acc=0.6)
    _toy(tmp_path, "p", acc=0.8, profile="paper")
    (tmp_path / "runs" / "toy" / "bad.json").write_text("nope")
    assert main(["toy", "--results-dir", str(tmp_path)]) == 0
    assert "60.0" in (tmp_path / "tables" / "smoke" / "toy.md").read_text()
    assert "80.0" in (tmp_path / "tables" / "paper" / "toy.md").read_text()
    assert capsys.readouterr().err.count("bad.json") == 1  # named once, not once per profile


COMMITTED = sorted((ROOT / "results" / "reference" / "tables").glob("*/*.md"))


def test_every_table_and_profile_with_committed_runs_has_a_committed_table():
    """So that the byte-for-byte test below covers every reference table there is."""
    tables = {p.stem for p in COMMITTED} | {p.stem for p in TABLE_CONF.glob("*.yaml")
                                            if load_spec(p.stem).get("kind") != "figure"}
    for table in sorted(tables):
        runs = runs_frame(ROOT / "results" / "reference", table)
        for profile in sorted(set(runs["profile"].astype(str))) if not runs.empty else []:
            assert (ROOT / "results" / "reference" / "tables" / profile / f"{table}.md").is_file(), \
                f"run `python -m tasks.common.tables {table} --reference --profile {profile}` and commit"


@pytest.mark.parametrize("md", COMMITTED, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_committed_reference_tables_are_regenerated_byte_for_byte(md, tmp_path):
    """`python -m tasks.common.tables <table> --reference --profile <p>` from the committed runs
    writes the committed .md/.csv/.tex unchanged: a renderer or protocol change that moves a
    byte is regenerated and committed with it (issue 30: the format changes once)."""
    from tasks.common.tables import make
    table, profile = md.stem, md.parent.name
    (tmp_path / "reference" / "runs").mkdir(parents=True)
    (tmp_path / "reference" / "runs" / table).symlink_to(ROOT / "results" / "reference" / "runs" / table)
    assert make(table, profile, tmp_path, reference=True)["runs"] > 0
    for ext in ("md", "csv", "tex"):
        new = (tmp_path / "reference" / "tables" / profile / f"{table}.{ext}").read_text()
        assert new == md.with_suffix(f".{ext}").read_text(), \
            f"run `python -m tasks.common.tables {table} --reference --profile {profile}` and commit"


def test_tables_and_verdicts_refuse_an_unknown_profile_in_one_line(tmp_path, capsys):
    from tasks.common import verdicts
    from tasks.common.protocol import profiles
    from tasks.common.tables import main
    (tmp_path / "runs").mkdir()
    for argv, cmd in ((["toy", "--profile", "smok", "--results-dir", str(tmp_path)], main),
                      (["--profile", "smok", "--root", str(tmp_path)], verdicts.main)):
        assert cmd(argv) == 2  # verdicts once wrote verdicts_smok.md
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: unknown profile 'smok': use one of {', '.join(profiles())}"]
    assert not list(tmp_path.rglob("*.md"))


def test_publish_reference_of_an_unknown_table_names_the_tables(tmp_path, capsys):
    from tasks.common.protocol import table_specs
    from tasks.common.tables import main
    (tmp_path / "runs").mkdir()
    argv = ["nosuch", "--profile", "cpu", "--publish", "--results-dir", str(tmp_path)]
    assert main(argv) == 2  # it said "run make reproduce-nosuch first"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: no table spec conf/table/nosuch.yaml: use one of "
                   f"{', '.join(table_specs())}"]
