"""The store's hand-written SQL (``admission/store/queries.sql``): every statement is one PostgreSQL
accepts against the migrated schema, says what it locks, and is used; the file's format is refused
when it is wrong, naming the entry."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import asyncpg
import pytest

from admission.store import notify, queries

ROOT = Path(__file__).resolve().parent.parent.parent
_BIND = re.compile(r"(?<![:\w]):([a-z_]+)")  # a bind parameter, not a ``::type`` cast


def _positional(sql: str) -> str:
    """``:name`` binds as asyncpg's ``$n`` (one number per name), to prepare the statement as is."""
    numbers: dict[str, int] = {}
    return _BIND.sub(lambda m: f"${numbers.setdefault(m.group(1), len(numbers) + 1)}", sql)


async def test_every_statement_prepares_against_the_migrated_schema(migrated_url: str) -> None:
    """A misspelt table, column or cast fails here, not in the step that first runs it."""
    statements = {e.name: e.sql for e in queries.entries().values() if e.kind == "name"}
    statements["rightsizing_grouped"] = queries.template("rightsizing_grouped").format(
        group="NULL::text", only="workload = :workload"
    )
    conn = await asyncpg.connect(notify.asyncpg_dsn(migrated_url))
    failed = {}
    try:
        for name, sql in statements.items():
            try:
                await conn.prepare(_positional(sql))
            except asyncpg.PostgresError as exc:
                failed[name] = str(exc)
    finally:
        await conn.close()
    assert failed == {}
    assert len(statements) > 40


def test_every_statement_says_what_it_locks_and_every_one_is_used() -> None:
    sources = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "admission").rglob("*.py"))
    sql = (ROOT / "admission" / "store" / "queries.sql").read_text(encoding="utf-8")
    for entry in queries.entries().values():
        if entry.kind != "fragment":
            assert entry.comment.startswith("locks:"), entry.name
        used = f'"{entry.name}"' in sources or f"{{{entry.name}}}" in sql
        assert used, f"{entry.name} is in queries.sql but nothing uses it"


def test_only_the_queries_module_turns_text_into_sql() -> None:
    """Raw SQL lives in queries.sql: no other module wraps a string as a statement (``tables`` keeps
    its columns' server defaults, which are schema, as the migrations write them)."""
    wrapping = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "admission").rglob("*.py")) + sorted((ROOT / "queues").rglob("*.py"))
        if any(
            isinstance(node, ast.ImportFrom)
            and node.module == "sqlalchemy"
            and any(alias.name == "text" for alias in node.names)
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        )
    ]
    assert wrapping == ["admission/store/queries.py", "admission/store/tables.py"]


def test_fragments_expand_and_a_statement_reads_as_written() -> None:
    entries = queries.parse(
        "-- fragment: who\nw.name\n\n-- name: find\n-- locks: none (a read).\n-- a second line\n"
        "SELECT {who} FROM workloads w WHERE w.labels = '{}'::jsonb;\n"
        "-- ---------------------------------------------------------------- next\n"
        "-- template: by\n-- locks: none.\nSELECT {group} FROM x\n"
    )
    assert entries["find"].sql == "SELECT w.name FROM workloads w WHERE w.labels = '{}'::jsonb"
    assert entries["find"].comment == "locks: none (a read).\na second line"
    assert entries["by"].sql == "SELECT {group} FROM x"


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("-- name: find\nSELECT 1;\n", "'find' has no '-- locks:' line"),
        ("-- name: a\n-- locks: none.\nSELECT 1;\n-- name: a\n-- locks: none.\nSELECT 2;\n", "'a' is defined twice"),
        ("-- name: a\n-- locks: none.\nSELECT {nothing};\n", "'a' refers to {nothing}"),
    ],
)
def test_a_wrong_entry_is_refused_naming_it(source: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        queries.parse(source)


def test_an_unknown_name_fails_loudly() -> None:
    with pytest.raises(KeyError, match="no name 'no_such_statement'"):
        queries.query("no_such_statement")
