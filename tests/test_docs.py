"""The README and docs/ name only modules that exist, and the README's links into docs/ resolve.

``make docs`` (``mkdocs build --strict``) checks the links between the pages of docs/; this
checks what mkdocs does not see: every ``electra.x.y`` / ``electra/x/y.py`` path in
README.md and docs/*.md (a module, a package, a file, or a name a module defines), the
README's links to docs/ pages and their anchors, and that docs/layout.md lists every module.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
PATH = re.compile(r"(?<![\w-])electra[./][a-z_./]+")


def defined_names(module: Path) -> set[str]:
    """Top-level names a module file defines or imports (read with ``ast``, never imported)."""
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def module_file(parts: list[str]) -> Path | None:
    """The file of module ``parts`` (``electra.a.b``): ``a/b.py`` or ``a/b/__init__.py``."""
    base = SRC.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def resolves(path: str) -> bool:
    """Whether ``electra/...`` is a file or folder, or ``electra.x.y`` a module or its name."""
    path = path.rstrip("./")
    if "/" in path:
        return (SRC / path).exists()
    parts = path.split(".")
    if module_file(parts) is not None:
        return True
    owner = module_file(parts[:-1])
    return owner is not None and parts[-1] in defined_names(owner)


def test_the_check_tells_a_stale_path_from_a_current_one() -> None:
    assert resolves("electra.pretrain.trainer") and resolves("electra/pretrain/configs/")
    assert resolves("electra.model.hf.load_discriminator") and resolves("electra.cli.")
    assert not resolves("electra.train") and not resolves("electra/configs/cpu.toml")
    assert not resolves("electra.model.hf.no_such_name")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_module_path_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    stale = sorted({m for m in PATH.findall(text) if not resolves(m)})
    assert not stale, f"{page.name} names paths that do not exist: {stale}"


def slug(heading: str) -> str:
    """The anchor of a heading as mkdocs (Python-Markdown's ``toc``) and GitHub make it."""
    text = re.sub(r"[`*]", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_the_readme_links_to_docs_pages_and_anchors_that_exist() -> None:
    links = re.findall(r"\]\((docs/[^)#\s]*)(?:#([^)\s]+))?\)", (ROOT / "README.md").read_text())
    assert links, "the README links to no page of docs/"
    for target, anchor in links:
        page = ROOT / target
        assert page.is_file() or (page / "index.md").is_file(), f"README links to {target}"
        if anchor:
            assert anchor in anchors(page), f"README links to {target}#{anchor}: no such heading"


def test_docs_layout_lists_every_module_of_every_package() -> None:
    text = (DOCS / "layout.md").read_text(encoding="utf-8")
    sections = re.split(r"^### `electra/(\w+)/`.*$", text, flags=re.M)
    listed = {
        pkg: set(re.findall(r"^- `(\w+\.py)`", body, flags=re.M))
        for pkg, body in zip(sections[1::2], sections[2::2], strict=True)
    }
    packages = {p.parent.name for p in SRC.glob("electra/*/__init__.py")}
    assert set(listed) == packages
    for pkg in packages:
        modules = {p.name for p in (SRC / "electra" / pkg).glob("*.py")} - {"__init__.py"}
        assert listed[pkg] == modules, f"docs/layout.md, electra/{pkg}/"
