"""Alembic environment (async): runs migrations over asyncpg against ``sqlalchemy.url``.

Migrations are serialised across processes by a PostgreSQL advisory lock held for the whole
upgrade: two replicas (or ``turnstile db upgrade`` beside ``sim up``) starting on a fresh
database one after the other each find the schema the other left, instead of both creating it.
"""

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import async_engine_from_config
from sqlalchemy.pool import NullPool

from admission.store import tables

config = context.config
target_metadata = tables.Base.metadata


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


MIGRATION_LOCK = 7_312_046_115_731_404  # pg_advisory_lock key: "turnstile migrations"


async def run_online() -> None:
    engine = async_engine_from_config(
        config.get_section(config.config_ini_section, {}),
        prefix="sqlalchemy.",
        poolclass=NullPool,
        connect_args=config.attributes.get("connect_args", {}),
    )
    async with engine.connect() as connection:
        await connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
        await connection.commit()
        try:
            await connection.run_sync(_run)
        finally:
            await connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
            await connection.commit()
    await engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    asyncio.run(run_online())
