"""No import cycle in the project, and the library imports nothing from the application.

The graph is read from the source with `ast` (nothing is imported): every module of zeros/,
kernels/ and tasks/, with an edge for each `import` / `from ... import` of another project
module, at module level or inside a function alike (an import inside a function still ties
the two modules together; it only hides the cycle from Python). `from pkg import name` is an
edge to pkg.name when that is a module, else to pkg (its __init__). The implicit import of a
parent package's __init__ is not an edge (every submodule would be in a cycle with it).
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("zeros", "kernels", "tasks")
LIBRARY = ("zeros", "kernels")

# No cycle is allowed anywhere (issue 30 removed the last ones: the results pipeline imports one
# way, store -> state -> protocol -> table -> figures -> the commands). Do not add to this set.
KNOWN_CYCLES: set[frozenset] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> nx.DiGraph:
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for name, path in files.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: `from ..ops import x` in zeros/mixers/attention.py
                    base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                           for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in files:  # `import zeros.ops.x` names a module or a parent
                    t = t.rpartition(".")[0]
                if t and t != name:
                    g.add_edge(name, t, line=node.lineno)
    return g


def _short(cycle) -> frozenset:
    return frozenset(m.removeprefix("tasks.common.") for m in cycle)


def _show(g, cycle) -> str:
    hops = [(a, b) for a, b in zip(cycle, cycle[1:] + cycle[:1])]
    return " -> ".join(f"{a} (line {g.edges[a, b]['line']})" for a, b in hops) + f" -> {cycle[0]}"


def test_no_new_import_cycle():
    g = import_graph()
    cycles = list(nx.simple_cycles(g))
    new = [c for c in cycles if _short(c) not in KNOWN_CYCLES]
    assert not new, ("import cycles (move the shared code into a module both import, or invert "
                     "one import):\n" + "\n".join(_show(g, c) for c in new))


def test_library_imports_nothing_from_tasks():
    g = import_graph()
    bad = [f"{a} imports {b} (line {g.edges[a, b]['line']})" for a, b in g.edges
           if a.split(".")[0] in LIBRARY and b.split(".")[0] == "tasks"]
    assert not bad, "zeros/ and kernels/ must stand alone (move the code to tasks/):\n" + \
        "\n".join(bad)


def test_graph_sees_imports_inside_functions():
    # the reader itself: an import inside a function is an edge (zeros/ops/api.py dispatches
    # to the Triton kernels from inside zeros_attention), and a relative import resolves
    g = import_graph()
    assert g.has_edge("zeros.ops.api", "kernels.zeros_triton")
    assert g.has_edge("zeros.mixers.attention", "zeros.layer")
