"""Running a CLI command against the store: URL, migrations, one transaction, clean errors."""

from __future__ import annotations

import asyncio
import getpass
import socket
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from admission.settings import Settings
from admission.store import database, embedded
from admission.store.database import schema_revision

T = TypeVar("T")


class StoreUnavailable(Exception):
    """The database cannot be reached or is not migrated; the message says what to do."""


def actor(settings: Settings) -> str:
    if settings.actor:
        return settings.actor
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


async def revision(url: str) -> str | None:
    """The schema revision of the database at ``url`` (None: no schema yet)."""
    engine = database.make_engine(url, pool_size=1)
    try:
        async with database.sessions(engine)() as session:
            return await schema_revision(session)
    finally:
        await engine.dispose()


def run(
    settings: Settings,
    fn: Callable[[AsyncSession], Awaitable[T]],
    *,
    database_url: str | None = None,
    migrate: bool | None = None,
) -> T:
    """Run ``fn`` in one transaction. The embedded database is migrated on first use; another
    database must be migrated explicitly (``turnstile db upgrade``)."""
    try:
        url = database.resolve_url(settings, database_url)
    except (embedded.EmbeddedPostgresError, ValueError) as exc:
        raise StoreUnavailable(str(exc)) from None
    auto = migrate if migrate is not None else not (database_url or settings.database_url)

    async def go() -> T:
        engine = database.make_engine(url, pool_size=2)
        try:
            factory = database.sessions(engine)
            async with factory() as session:
                current = await schema_revision(session)
            head = database.SCHEMA_HEAD
            if current != head:
                if not auto:
                    raise StoreUnavailable(
                        f"the database schema is at {current or 'nothing'}, not {head}; run `turnstile db upgrade`"
                    )
                await database.upgrade(url)
            async with database.transaction(factory) as session:
                return await fn(session)
        except (DBAPIError, OperationalError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(database.explain(exc, url)) from None
        finally:
            await engine.dispose()

    return asyncio.run(go())
