"""Every key of a table spec (conf/table/*.yaml) is read by the code that makes the table: a key
no code reads (the former `grid: [lr, weight_decay]`) reads like protocol but changes nothing.
Read = `spec.get("k")` / `spec["k"]` (also on a column `col`/`c` or an extra `e`) in the results
pipeline or in the spec's own `plot` hook."""
from __future__ import annotations

import ast
import importlib.util

import pytest
import yaml

from tasks.common.store import CONF, ROOT

READERS = [ROOT / "tasks" / "common" / f"{m}.py"
           for m in ("protocol", "table", "tables", "figures", "curves", "verdicts", "wandb_log")]
NAMES = {"spec", "col", "c", "e"}  # how the readers name a spec, a column and an extra
DATA = {"paper", "note"}  # keyed by row / profile: values, not keys of the format
SPECS = sorted(CONF.glob("table/*.yaml"))


def _name(node) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def read_keys(path) -> set[str]:
    keys = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and _name(node.value) in NAMES \
                and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and _name(node.func.value) in NAMES \
                and node.args and isinstance(node.args[0], ast.Constant):
            keys.add(node.args[0].value)
        elif isinstance(node, ast.comprehension) and isinstance(node.iter, ast.Tuple) and any(
                isinstance(i, ast.Compare) and _name(i.comparators[0]) in NAMES for i in node.ifs):
            keys |= {e.value for e in node.iter.elts if isinstance(e, ast.Constant)}  # k in (...) if k in e
    return keys


def spec_keys(spec: dict) -> set[str]:
    """Its top-level keys and the keys of its list items (columns, extras, rows)."""
    keys = set(spec)
    for k, v in spec.items():
        if k not in DATA and isinstance(v, list):
            keys |= {kk for item in v if isinstance(item, dict) for kk in item}
    return keys


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_every_table_spec_key_is_read_by_code(path):
    spec = yaml.safe_load(path.read_text())
    readers = list(READERS)
    if spec.get("plot"):
        readers.append(importlib.util.find_spec(spec["plot"].rsplit(".", 1)[0]).origin)
    read = set().union(*(read_keys(ROOT / r) for r in readers))
    unread = sorted(spec_keys(spec) - read)
    assert not unread, f"conf/table/{path.name}: no code reads {unread}: remove them or read them"
