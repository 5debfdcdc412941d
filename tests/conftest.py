"""Shared fixtures: a real PostgreSQL for store tests (never a mock, never SQLite).

The server is the embedded one (a fresh data folder under /tmp, deleted afterwards) unless
``TURNSTILE_TEST_DATABASE_URL`` names another, such as CI's PostgreSQL 15. Each test that
needs a database gets a new, empty one, so tests never see each other's rows.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from admission.settings import normalise_database_url
from admission.store import database, embedded, notify


def _dsn(url: str, db: str | None = None) -> str:
    """An asyncpg DSN from a SQLAlchemy URL, optionally for another database."""
    plain = notify.asyncpg_dsn(url)
    if db is None:
        return plain
    head, _, tail = plain.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{db}" + (f"?{tail}" if tail else "")


def _url_for(url: str, db: str) -> str:
    return normalise_database_url(_dsn(url, db))


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    configured = os.environ.get("TURNSTILE_TEST_DATABASE_URL")
    if configured:
        yield normalise_database_url(configured)
        return
    folder = Path(tempfile.mkdtemp(prefix="turnstile-test-"))
    yield embedded.start(folder / "pg", database="postgres", cleanup="delete")


@pytest.fixture(scope="session")
def new_database(server_url: str) -> Iterator[Callable[[], str]]:
    """Make empty databases on the test server; all are dropped at the end of the session."""
    made: list[str] = []

    async def _create(name: str) -> None:
        conn = await asyncpg.connect(_dsn(server_url))
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    def make() -> str:
        name = f"turnstile_test_{uuid.uuid4().hex[:12]}"
        asyncio.run(_create(name))
        made.append(name)
        return _url_for(server_url, name)

    yield make

    async def _drop() -> None:
        conn = await asyncpg.connect(_dsn(server_url))
        try:
            for name in made:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    asyncio.run(_drop())


@pytest.fixture
def migrated_url(new_database: Callable[[], str]) -> str:
    url = new_database()
    database.upgrade_sync(url)
    return url


@pytest_asyncio.fixture
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    eng = database.make_engine(migrated_url)
    yield eng
    await eng.dispose()


@pytest.fixture
def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return database.sessions(engine)
