"""Engines as the controller makes them (``admission.store.database.make_engine``), on real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from admission.store import database


async def test_a_connection_left_mid_operation_is_dropped_not_taken_for_an_outage(migrated_url: str) -> None:
    """asyncpg says "another operation is in progress" on a connection a cancelled call left busy: that
    connection is invalidated (the pool replaces it), the error is told apart from an outage, and the
    next transaction works."""
    engine = database.make_engine(migrated_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            busy = asyncio.create_task(raw.driver_connection.fetchval("SELECT pg_sleep(0.5)"))
            await asyncio.sleep(0.05)
            with pytest.raises(sa_exc.DBAPIError) as failed:
                await conn.execute(text("SELECT 1"))
            assert failed.value.connection_invalidated
            assert database.connection_fault(failed.value)
            await asyncio.gather(busy, return_exceptions=True)
        async with database.transaction(database.sessions(engine)) as session:
            assert (await session.execute(text("SELECT 1"))).scalar_one() == 1
        assert not database.connection_fault(OSError("connection refused"))
    finally:
        await engine.dispose()
