"""Rewrite the module tables of docs/layout.md from each module's docstring (its first paragraph).

    python tools/layout_page.py

The text above the first table (the layers and their rule) is kept; ``tests/test_layout.py`` checks that the
page lists every module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDER = ("formulas", "inputs", "model", "simulator", "planning", "answers", "render", "cli", "fileio", "runtime")


def first_paragraph(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")


def tables() -> str:
    out = []
    for layer in ORDER:
        package = ROOT / "capacity" / layer
        out += [f"### `capacity/{layer}/`", "", first_paragraph(package / "__init__.py"), "",
                "| module | what it holds |", "|---|---|"]
        for path in sorted(package.rglob("*.py")):
            if path.name == "__init__.py" and path.parent == package and layer not in ("cli", "simulator"):
                continue
            out.append(f"| `{path.relative_to(ROOT / 'capacity').as_posix()}` | {first_paragraph(path)} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    page = ROOT / "docs" / "layout.md"
    text = page.read_text()
    head, _, rest = text.partition("### `capacity/formulas/`")
    tail = rest[rest.index("\nTop level:"):] if "\nTop level:" in rest else ""
    page.write_text(head + tables() + tail)


if __name__ == "__main__":
    main()
