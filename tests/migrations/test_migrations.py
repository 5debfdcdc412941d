"""Migrations produce exactly the models' schema, and undo cleanly."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from admission.store import database, tables


def _diff(url: str) -> list[Any]:
    async def run() -> list[Any]:
        engine = database.make_engine(url)
        try:
            async with engine.connect() as conn:

                def compare(sync: Connection) -> list[Any]:
                    ctx = MigrationContext.configure(sync, opts={"compare_type": True})
                    return list(compare_metadata(ctx, tables.Base.metadata))

                return await conn.run_sync(compare)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _tables(url: str) -> set[str]:
    async def run() -> set[str]:
        engine = database.make_engine(url)
        try:
            async with engine.connect() as conn:
                return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
        finally:
            await engine.dispose()

    return asyncio.run(run())


def test_upgrade_head_matches_the_models(new_database: Callable[[], str]) -> None:
    url = new_database()
    database.upgrade_sync(url)
    assert _diff(url) == []
    assert _tables(url) == set(tables.Base.metadata.tables) | {"alembic_version"}


def test_downgrade_base_removes_everything_and_upgrade_again_works(new_database: Callable[[], str]) -> None:
    url = new_database()
    database.upgrade_sync(url)
    database.downgrade_sync(url, "base")
    assert _tables(url) == {"alembic_version"}
    database.upgrade_sync(url)
    assert _diff(url) == []


def test_concurrent_upgrades_of_a_fresh_database_are_serialised(new_database: Callable[[], str]) -> None:
    """Eight `turnstile db upgrade` processes at once on an empty database (replicas starting
    together, `sim up` beside a controller): each waits for the migration lock and finds the
    schema the first one made; none fails."""
    import os
    import subprocess
    import sys

    url = new_database()
    env = {**os.environ, "TURNSTILE_DATABASE_URL": url}
    cmd = [sys.executable, "-m", "admission.cli.main", "db", "upgrade"]
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err for _, err in results]
    assert _diff(url) == []


def test_the_schema_head_the_cli_checks_is_alembics() -> None:
    """The CLI tells a migrated database by ``database.SCHEMA_HEAD`` without loading alembic: a new
    migration must bump it (else every CLI command would ask to `turnstile db upgrade` for ever)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(database.alembic_config("postgresql://x@localhost/x")).get_current_head()
    assert head == database.SCHEMA_HEAD, f"set SCHEMA_HEAD = {head!r} in admission/store/database.py"
