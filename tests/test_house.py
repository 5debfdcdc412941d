"""The house rules the import contracts cannot see (docs/architecture.md, CONTRIBUTING.md): one
concept per module (at most 400 lines), no package a heap of more than 20 modules, and every SQL
statement in ``admission/store``. A module that breaks a rule for now is named here with why, so
the list can only shrink."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("queues", "admission")
MAX_LINES = 400
MAX_MODULES = 20
# Modules allowed over MAX_LINES for now, each with what splitting it waits for (none today).
TOO_LONG_FOR_NOW: dict[str, str] = {}
# What only the store may build: statements (the CLI, the dashboard and the controller ask the
# store's repositories and read models instead).
SQL_BUILDERS = frozenset({"select", "text", "insert", "update", "delete", "func", "literal_column", "union_all"})


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _too_long(paths: list[Path]) -> dict[str, int]:
    return {
        str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p): n
        for p in paths
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }


def _sql_built(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            built = sorted(SQL_BUILDERS & {alias.name for alias in node.names})
            if built:
                found.append(f"{path.name}:{node.lineno} imports {', '.join(built)} from {node.module}")
    return found


def test_no_module_is_longer_than_400_lines() -> None:
    too_long = _too_long(_modules())
    assert set(too_long) - set(TOO_LONG_FOR_NOW) == set(), too_long
    mended = set(TOO_LONG_FOR_NOW) - set(too_long)
    assert not mended, f"{mended} are short enough now: take them off TOO_LONG_FOR_NOW"


def test_no_package_is_a_heap_of_more_than_20_modules() -> None:
    folders = {p.parent for p in _modules()}
    heaps = {
        str(folder.relative_to(ROOT)): n
        for folder in folders
        if (n := sum(1 for m in folder.glob("*.py") if m.name != "__init__.py")) > MAX_MODULES
    }
    assert heaps == {}


def test_sql_is_built_only_in_the_store() -> None:
    outside = [
        found
        for path in _modules()
        if path.relative_to(ROOT).parts[:2] != ("admission", "store")
        for found in _sql_built(path)
    ]
    assert outside == []


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The checks above read real files: shown here to catch a long module and a query."""
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_LINES + 1), encoding="utf-8")
    short = tmp_path / "short.py"
    short.write_text("x = 1\n" * MAX_LINES, encoding="utf-8")
    assert list(_too_long([long, short])) == [str(long)]
    query = tmp_path / "query.py"
    query.write_text("from sqlalchemy import func, select\nfrom sqlalchemy.ext.asyncio import AsyncSession\n")
    assert _sql_built(query) == ["query.py:1 imports func, select from sqlalchemy"]
    assert _sql_built(short) == []
