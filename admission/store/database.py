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
from typing import TYPE_CHECKING, Any

import pydantic_core
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from admission import urls
from admission.settings import Settings
from admission.store import embedded
from admission.store.queries import query, template

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"

# What a database call raises when the database is unreachable, slow or drops the connection
# (including a statement timeout): temporary, worth retrying, never a bug.
ERRORS: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError,
    sa_exc.DBAPIError,
    sa_exc.TimeoutError,
    OSError,
    TimeoutError,
)


def resolve_url(settings: Settings, override: str | None = None) -> str:
    """The asyncpg URL to use: a flag, then TURNSTILE_DATABASE_URL, else the embedded server."""
    from admission.settings import normalise_database_url

    if override:
        return normalise_database_url(override)
    if settings.database_url:
        return settings.database_url
    return embedded.start(settings.home / "pg")


COMMAND_TIMEOUT = 60.0  # seconds any one statement may take before the client gives up on it


def make_engine(
    url: str,
    *,
    pool_size: int = 5,
    idle_in_transaction_timeout: float | None = None,
    command_timeout: float = COMMAND_TIMEOUT,
    application_name: str | None = None,
) -> AsyncEngine:
    """An engine whose every call is bounded: connecting (the URL's ``connect_timeout``, else 10 s)
    and each statement (``command_timeout``: a black-holed connection fails instead of hanging).
    ``idle_in_transaction_timeout`` makes PostgreSQL end a transaction left idle that long (a
    frozen process must not hold its row locks forever: the controller sets it to its lease's
    TTL, so a paused ex-leader cannot block the new leader's takeover)."""
    args = urls.connect_args(url)
    args["command_timeout"] = command_timeout
    if application_name is not None:  # what pg_stat_activity shows (the URL's application_name wins)
        args["server_settings"] = {"application_name": application_name, **args.get("server_settings", {})}
    if idle_in_transaction_timeout is not None:
        millis = str(max(1, int(idle_in_transaction_timeout * 1000)))
        args["server_settings"] = {**args.get("server_settings", {}), "idle_in_transaction_session_timeout": millis}
    engine = create_async_engine(
        urls.engine_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        connect_args=args,
        # JSONB read with pydantic's Rust codec: a third of the standard library's time, on every
        # workload row the controller reads (PostgreSQL's jsonb never holds what it would refuse)
        json_deserializer=pydantic_core.from_json,
    )
    event.listen(engine.sync_engine, "handle_error", _busy_is_disconnect)
    return engine


# asyncpg's answer on a connection that a cancelled call left mid-operation (a timeout around a
# statement): the connection is unusable, the database is fine. Taken as a disconnect, SQLAlchemy
# drops that connection (its pre-ping replaces it before anyone uses it) instead of failing again.
BUSY_CONNECTION = "another operation is in progress"


def _busy_is_disconnect(context: Any) -> None:
    if BUSY_CONNECTION in str(context.original_exception):
        context.is_disconnect = True


def connection_fault(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is a connection left unusable, not a database outage."""
    while exc is not None:
        if BUSY_CONNECTION in str(exc):
            return True
        exc = exc.__cause__
    return False


def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@asynccontextmanager
async def transaction(factory: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """One transaction: committed when the block ends, rolled back if it raises."""
    async with factory() as session, session.begin():
        yield session


# The newest migration (``migrations/versions``). Kept here so a CLI command can tell a migrated
# database without loading alembic and every migration script (a third of its start-up);
# tests/migrations checks it against alembic's own head, so a new migration must bump it.
SCHEMA_HEAD = "0016"


def alembic_config(url: str) -> Config:
    from alembic.config import Config  # (alembic loads only where it is used: start-up time)

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", urls.engine_url(url).replace("%", "%%"))
    cfg.attributes["connect_args"] = urls.connect_args(url)
    return cfg


# Alembic keeps its migration context in module globals: two upgrades running at once in one
# process (engine cluster runs, tests) would share it. One at a time.
_ALEMBIC = threading.Lock()


def upgrade_sync(url: str, revision: str = "head") -> None:
    from alembic import command

    with _ALEMBIC:
        command.upgrade(alembic_config(url), revision)


def downgrade_sync(url: str, revision: str = "base") -> None:
    from alembic import command

    with _ALEMBIC:
        command.downgrade(alembic_config(url), revision)


async def upgrade(url: str, revision: str = "head") -> None:
    await asyncio.to_thread(upgrade_sync, url, revision)


def explain(exc: BaseException, url: str) -> str:
    """A connection or statement failure as a person can act on it: a missing database or role is
    named as such, a timeout says how long was waited; the URL appears masked."""
    orig = getattr(exc, "orig", None) or exc
    cause = getattr(orig, "__cause__", None) or orig
    where = urls.masked(url).split("?")[0]
    name = type(cause).__name__
    if name == "InvalidCatalogNameError":
        db = urls.database_name(url)
        return f'database "{db}" does not exist at {where}; create it (CREATE DATABASE "{db}") or fix the URL'
    if name in ("InvalidAuthorizationSpecificationError", "InvalidPasswordError"):
        return f"PostgreSQL refused the login at {where}: {describe_error(cause)} (check the user, password and pg_hba)"
    if isinstance(cause, TimeoutError) or name in ("TimeoutError", "QueryCanceledError"):
        return f"PostgreSQL at {where} did not answer in time; is it reachable (network, firewall, load)?"
    if isinstance(cause, OSError):
        return f"cannot reach PostgreSQL at {where}: {cause.strerror or cause}"
    return f"PostgreSQL at {where}: {describe_error(exc)}"


def describe_error(exc: BaseException, limit: int = 300) -> str:
    """A database error in one short line: the driver's message, without SQLAlchemy's copy of the
    statement and its parameters (a cycle's statement can carry 50,000 ids)."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"


async def schema_revision(session: AsyncSession) -> str | None:
    """The schema's revision; None when the database has no schema yet (not when it is unreachable)."""
    found = await session.execute(query("database_has_revisions"))
    if not found.scalar_one():
        return None
    result = await session.execute(query("database_revision"))
    return result.scalar_one_or_none()


@asynccontextmanager
async def scratch(database_url: str, prefix: str = "turnstile_sim") -> AsyncIterator[str]:
    """A new database beside ``database_url``'s (same server and user), migrated to head, for the
    block's life, then dropped with whatever still connects to it: a simulation's own store on
    a shared PostgreSQL. Yields its URL."""
    import secrets

    import asyncpg

    from admission.store import notify

    name = f"{prefix}_{secrets.token_hex(4)}"
    admin = notify.asyncpg_dsn(database_url)

    async def run(statement: str) -> None:
        conn = await asyncpg.connect(admin)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    await run(template("database_create").format(name=name))
    base, _, params = database_url.partition("?")
    url = base.rsplit("/", 1)[0] + f"/{name}" + (f"?{params}" if params else "")
    try:
        await upgrade(url)
        yield url
    finally:
        await run(template("database_drop").format(name=name))
