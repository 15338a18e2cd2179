"""The Makefile's front door: `make help` grouped by area with nothing unexpanded, and an unknown
`make reproduce-<x>` naming the valid tables (a `reproduce-%` rule, not make's own error)."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from framework_helpers import REPO
from tasks.common.protocol import table_names

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _make(*args):
    return subprocess.run(["make", "--no-print-directory", f"PY={sys.executable}", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_help_is_grouped_by_area_and_shows_no_make_variables():
    r = _make("help")
    assert r.returncode == 0, r.stderr
    heads = [ln for ln in r.stdout.splitlines() if ln and not ln.startswith(" ")]
    assert heads[0] == "Set-up and tests" and "Tables and runs (docs/framework.md)" in heads
    assert "$(" not in r.stdout
    section = r.stdout.split("Tables and runs")[1].split("\n\n")[0]
    assert "reproduce-table1" in section and "make status" in section


def test_unknown_reproduce_target_lists_the_tables_and_exits_2():
    r = _make("reproduce-nosuchtable")
    assert r.returncode == 2
    known = ", ".join(table_names())  # every folder of conf/experiment/: no list to keep here
    assert f"error: unknown table 'nosuchtable': use one of {known}" in r.stderr, r.stderr
    assert "table1" in known


@pytest.mark.parametrize("args, words", [
    (["generate"], "error: make generate needs CKPT="),
    (["status"], "error: make status needs TABLE="),
    (["verdicts", "PROFILE=nope", "ARGS=--root /nonexistent"], "error: unknown profile 'nope'"),
])
def test_a_target_without_its_variable_is_one_line_exit_2(args, words):
    r = _make(*args)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert len([ln for ln in r.stderr.splitlines() if not ln.startswith("make")]) == 1, r.stderr
