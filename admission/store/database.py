"""Engines, sessions and migrations: where the database is and getting it to the current schema.

``resolve_url`` picks the configured ``TURNSTILE_DATABASE_URL`` or starts the embedded server
under ``TURNSTILE_HOME/pg``. ``upgrade`` applies the Alembic migrations; it runs Alembic in a
worker thread because Alembic's async ``env.py`` starts its own event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from admission.settings import Settings
from admission.store import embedded

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


def resolve_url(settings: Settings, override: str | None = None) -> str:
    """The asyncpg URL to use: a flag, then TURNSTILE_DATABASE_URL, else the embedded server."""
    from admission.settings import normalise_database_url

    if override:
        return normalise_database_url(override)
    if settings.database_url:
        return settings.database_url
    return embedded.start(settings.home / "pg")


def make_engine(url: str, *, pool_size: int = 5, idle_in_transaction_timeout: float | None = None) -> AsyncEngine:
    """An engine; ``idle_in_transaction_timeout`` makes PostgreSQL end a transaction left idle that
    long (a frozen process must not hold its row locks forever: the controller sets it to its
    lease's TTL, so a paused ex-leader cannot block the new leader's takeover)."""
    connect_args = {}
    if idle_in_transaction_timeout is not None:
        millis = str(max(1, int(idle_in_transaction_timeout * 1000)))
        connect_args = {"server_settings": {"idle_in_transaction_session_timeout": millis}}
    return create_async_engine(
        url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, connect_args=connect_args
    )


def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@asynccontextmanager
async def transaction(factory: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """One transaction: committed when the block ends, rolled back if it raises."""
    async with factory() as session, session.begin():
        yield session


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


# Alembic keeps its migration context in module globals: two upgrades running at once in one
# process (engine cluster runs, tests) would share it. One at a time.
_ALEMBIC = threading.Lock()


def upgrade_sync(url: str, revision: str = "head") -> None:
    with _ALEMBIC:
        command.upgrade(alembic_config(url), revision)


def downgrade_sync(url: str, revision: str = "base") -> None:
    with _ALEMBIC:
        command.downgrade(alembic_config(url), revision)


async def upgrade(url: str, revision: str = "head") -> None:
    await asyncio.to_thread(upgrade_sync, url, revision)


def describe_error(exc: BaseException, limit: int = 300) -> str:
    """A database error in one short line: the driver's message, without SQLAlchemy's copy of the
    statement and its parameters (a cycle's statement can carry 50,000 ids)."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"
