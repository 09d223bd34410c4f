"""The package layout shows the layers (issue 27): each layer imports only the layers before it, docs/layout.md
lists every module, and every test module sits in the folder of the layer it tests."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "capacity"

#: The layers in order (docs/layout.md); a module may import its own layer and those before it.
ORDER = ("formulas", "inputs", "model", "simulator", "planning", "answers", "render", "cli")
#: Used by every layer: errors, bounded files, time budgets and threads.
EVERYWHERE = {"errors", "fileio", "runtime"}
#: Back-edges kept on purpose, each explained in docs/layout.md.
ALLOWED = {("planning/sweep.py", "render")}


def _imports(path: Path) -> set[str]:
    """The ``capacity`` sub-packages (or top-level modules) a module imports, wherever in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "capacity" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_each_layer_imports_only_the_layers_before_it():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) == 1:
            continue  # capacity/__init__.py, __main__.py, errors.py
        layer = rel.parts[0]
        assert layer in ORDER or layer in EVERYWHERE, f"{rel}: layer {layer!r} is not in docs/layout.md's order"
        allowed = set(ORDER[: ORDER.index(layer) + 1]) if layer in ORDER else {layer}
        for imported in _imports(path) - allowed - EVERYWHERE:
            if (rel.as_posix(), imported) not in ALLOWED:
                wrong.append(f"{rel} imports capacity.{imported}")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_no_relative_imports_in_the_package():
    """Absolute imports say where a name lives; the layer rule above reads them."""
    relative = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in PACKAGE.rglob("*.py")
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert not relative, relative


def test_the_layout_page_lists_every_module():
    text = (ROOT / "docs" / "layout.md").read_text()
    missing = [rel.as_posix() for path in sorted(PACKAGE.rglob("*.py"))
               if len((rel := path.relative_to(PACKAGE)).parts) > 1 and path.name != "__init__.py"
               and f"`{rel.as_posix()}`" not in text]
    assert not missing, f"docs/layout.md does not list {missing}"


def test_the_readme_names_every_layer():
    readme = (ROOT / "README.md").read_text()
    assert all(f"{layer}/" in readme for layer in ORDER + ("fileio", "runtime"))


def test_tests_sit_in_their_layer():
    """No test module at the top of tests/ except this one; each layer folder is a layer of the package."""
    loose = [p.name for p in (ROOT / "tests").glob("test_*.py") if p.name != "test_layout.py"]
    assert not loose, f"move {loose} into tests/<layer>/"
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(ORDER) | EVERYWHERE | {"app"}, folders - set(ORDER) - EVERYWHERE
