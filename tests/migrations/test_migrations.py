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
