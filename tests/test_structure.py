"""The structure drawing of the app (docs/structure.md) is true, and has no circle.

The drawing is made from the imports themselves (grimp, the graph import-linter
reads): every top-level package of ``oxide_batch`` on the row of its height —
one above the highest package it imports — so every arrow points down a row.
Imports made for type checking only (``if TYPE_CHECKING:``) never run and are
left out. ``python -m tests.test_structure`` rewrites the document.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp

ROOT = "oxide_batch"
DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "structure.md"


def graph() -> grimp.ImportGraph:
    return grimp.build_graph(
        ROOT, include_external_packages=False, exclude_type_checking_imports=True
    )


def circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(imports.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(imports) + 100))
    for node in sorted(imports):
        if node not in index:
            visit(node)
    return found


def module_imports(built: grimp.ImportGraph) -> dict[str, set[str]]:
    return {
        module: set(built.find_modules_directly_imported_by(module)) for module in built.modules
    }


def package_imports(built: grimp.ImportGraph) -> dict[str, set[str]]:
    """Top-level package → the top-level packages it imports."""
    packages = sorted({module.split(".")[1] for module in built.modules if "." in module})
    return {
        package: {
            other
            for other in packages
            if other != package
            and built.direct_import_exists(
                importer=f"{ROOT}.{package}", imported=f"{ROOT}.{other}", as_packages=True
            )
        }
        for package in packages
    }


def heights(imports: dict[str, set[str]]) -> dict[str, int]:
    found: dict[str, int] = {}

    def height(package: str) -> int:
        if package not in found:
            below = [height(other) for other in imports[package]]
            found[package] = 1 + max(below) if below else 0
        return found[package]

    for package in imports:
        height(package)
    return found


def drawing(imports: dict[str, set[str]]) -> str:
    levels = heights(imports)
    rows = []
    for level in sorted(set(levels.values()), reverse=True):
        members = sorted(package for package, height in levels.items() if height == level)
        rows.append(f"{level:>2}  " + "  ".join(members))
    table = "\n".join(
        f"| `{package}` | {levels[package]} | "
        + (", ".join(f"`{other}`" for other in sorted(imports[package])) or "—")
        + " |"
        for package in sorted(imports, key=lambda p: (-levels[p], p))
    )
    return (
        "# The structure of oxide_batch\n\n"
        "Made from the imports by `python -m tests.test_structure` (grimp, as\n"
        "import-linter reads them; imports for type checking only are left out),\n"
        "and checked by `tests/test_structure.py`: a package stands one row above\n"
        "the highest package it imports, so every import points down — there is\n"
        "no import from a lower row to a higher one, and no circle, between\n"
        "packages or between modules. The layers import-linter enforces\n"
        "(`pyproject.toml`) are a coarser cut of the same picture.\n\n"
        "```\n" + "\n".join(rows) + "\n```\n\n"
        "| package | row | imports |\n| --- | --- | --- |\n" + table + "\n"
    )


def test_no_module_imports_itself_through_others() -> None:
    assert circles(module_imports(graph())) == []


def test_no_package_circle_and_the_drawing_is_current() -> None:
    imports = package_imports(graph())
    assert circles(imports) == []
    assert DOCUMENT.read_text("utf-8") == drawing(imports), (
        "docs/structure.md is out of date: run python -m tests.test_structure"
    )


def test_a_circle_is_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


if __name__ == "__main__":
    DOCUMENT.write_text(drawing(package_imports(graph())), "utf-8")
