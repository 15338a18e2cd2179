"""Every pointer into the docs resolves: a `docs/<file>.md` (or tasks/, results/ .md) named in a
tracked source, config, Makefile or doc exists, and a quoted section after it (`docs/<file>.md
"Caps"`, `docs/<file>.md, "Resume"`) occurs in that file. The docs are split and moved as they grow
(docs/synthetic_cpu.md became six files); a reference left behind fails here, not in a reader's
hands."""
from __future__ import annotations

import re
import subprocess

import pytest

from framework_helpers import REPO

SUFFIXES = (".py", ".md", ".yaml", ".mk", ".toml")
# a path, then optionally `, "Section"` / ` "Section"` / ` section "Section"` / ` ("Section"`
REF = re.compile(r'(?<![\w/.])((?:docs|tasks|results)/[\w./-]+\.md)'
                 r'(?:,? (?:section )?\(?"([^"]{3,80})")?')


def _flat(text: str) -> str:
    """One line: comment markers of wrapped YAML/Python/Make comments, backticks and runs of
    white space go, so a quote wrapped over two comment lines still matches the heading."""
    text = re.sub(r"\n\s*#+\s?", " ", text)
    return re.sub(r"\s+", " ", text.replace("`", ""))


def _sources() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [f for f in out.stdout.split() if f.endswith(SUFFIXES) or f == "Makefile"]


def _refs() -> list[tuple[str, str, str | None]]:
    refs = []
    for src in _sources():
        text = _flat((REPO / src).read_text(errors="ignore"))
        refs += [(src, m.group(1), m.group(2)) for m in REF.finditer(text)]
    return refs


def test_doc_refs_resolve():
    refs = _refs()
    assert len(refs) > 100  # the scan finds the repository's references at all
    broken = []
    for src, path, quote in refs:
        target = REPO / path
        if path.startswith("results/"):
            continue  # results/ holds generated files a fresh clone may not have yet
        if not target.is_file():
            broken.append(f"{src}: {path} does not exist")
        elif quote and quote.replace("`", "") not in _flat(target.read_text()):
            broken.append(f'{src}: {path} has no "{quote}"')
    assert not broken, "\n".join(broken)


def test_doc_refs_catches_a_dangling_section():
    """The check itself can fail: a made-up pointer to a missing section is found."""
    docs = "docs" + "/"  # not written out: the scan reads this file too
    text = _flat(f'see {docs}framework.md "No such section here"\n# {docs}nowhere.md')
    found = [(m.group(1), m.group(2)) for m in REF.finditer(text)]
    assert (f"{docs}framework.md", "No such section here") in found
    assert (f"{docs}nowhere.md", None) in found
    assert "No such section here" not in _flat((REPO / docs / "framework.md").read_text())
    assert not (REPO / docs / "nowhere.md").exists()


def test_markdown_links_resolve():
    """[text](other.md) links of the Markdown files, relative to the file that holds them."""
    broken = []
    for src in (s for s in _sources() if s.endswith(".md")):
        for link in re.findall(r"\]\(([^)#\s]+\.(?:md|png|csv|yaml|py))[)#]", (REPO / src).read_text()):
            if "://" not in link and not (REPO / src).parent.joinpath(link).exists():
                broken.append(f"{src}: ({link}) does not exist")
    assert not broken, "\n".join(broken)
