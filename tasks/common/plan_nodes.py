"""The fast part of `make plan` (tasks/common/plan.py): resolving a sweep point's config.

Resolving interpolations is what planning a grid costs (OmegaConf parses every `${...}` string
again at each access), so each top-level node is resolved once per distinct value of the sweep
overrides it can depend on (NodeCache), and OmegaConf's parse is memoized while planning
(parse_cache). tests/framework/test_framework_plan.py compares every point of a Table 1 group
with the whole config resolved at that point.
"""
from __future__ import annotations

import functools
import re
from contextlib import contextmanager

from omegaconf import OmegaConf


_WORD = re.compile(r"[A-Za-z_][\w-]*")


class NodeCache:
    """The resolved top-level nodes of one composed config whose sweep points differ only in
    the plain overrides `keys`. A node depends on the overrides under the top-level keys that
    its interpolations name (transitively: a textual scan of each `${...}` string, so a name in
    a resolver's argument, e.g. oc.select's, counts too); it is resolved once per distinct
    text of those overrides. Resolved every time: nodes reaching `hydra` (classify rewrites its
    overrides per point) and all of them when an override value is itself an interpolation."""

    def __init__(self, cfg, keys: list[str]):
        raw = OmegaConf.to_container(cfg, resolve=False)
        self.tops = [k for k in raw if k != "hydra"]
        names = {k: self._names(raw[k]) for k in self.tops}
        self.deps: dict[str, tuple | None] = {}
        for k in self.tops:
            seen, todo = {k}, [k]
            while todo:
                for n in names.get(todo.pop(), ()):
                    if n not in seen:
                        seen.add(n)
                        todo.append(n)
            self.deps[k] = None if "hydra" in seen else \
                tuple(i for i, key in enumerate(keys) if key.lstrip("+~").split(".")[0] in seen)
        self.cache: dict = {}

    @staticmethod
    def _names(node) -> set[str]:
        out, stack = set(), [node]
        while stack:
            x = stack.pop()
            if isinstance(x, dict):
                stack += list(x.values())
            elif isinstance(x, list):
                stack += x
            elif isinstance(x, str) and "${" in x:
                out.update(_WORD.findall(x))
        return out

    def resolve(self, cfg, texts: list[str], only: list[str] | None = None) -> dict:
        from .store import resolved_node
        fresh = any("${" in t for t in texts)
        out = {}
        for k in only or self.tops:
            dep = self.deps[k]
            if fresh or dep is None:
                out[k] = resolved_node(cfg, k)
                continue
            key = (k, tuple(texts[i] for i in dep))
            if key not in self.cache:
                self.cache[key] = resolved_node(cfg, k)
            out[k] = self.cache[key]
        return out


@contextmanager
def parse_cache():
    """While planning: OmegaConf parses each `${...}` string again at every resolution (its
    ANTLR parser, ~0.3 ms a string; a grid resolves the same few hundred strings thousands of
    times), so its parse function is memoized (the trees are only read). Restored after; a
    no-op if OmegaConf's module layout changes (omegaconf 2.3: base.parse)."""
    import omegaconf.base as base
    original = getattr(base, "parse", None)
    if original is None or hasattr(original, "cache_info"):
        yield
        return
    base.parse = functools.lru_cache(maxsize=8192)(original)
    try:
        yield
    finally:
        base.parse = original
