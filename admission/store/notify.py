"""LISTEN for configuration changes: a wake-up hint, never the only trigger.

``config.apply``/``delete`` send ``NOTIFY turnstile_config, 'Kind/name'`` inside their
transaction, so listeners hear of a change only once it is committed. A listener must still
poll now and then: notifications are lost while its connection is down.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from admission.store.config import NOTIFY_CHANNEL


def asyncpg_dsn(url: str) -> str:
    """The plain libpq-style DSN asyncpg wants, from a SQLAlchemy URL."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


@asynccontextmanager
async def listen(url: str, channel: str = NOTIFY_CHANNEL) -> AsyncIterator[asyncio.Queue[str]]:
    """A queue that receives the payload of every notification on ``channel`` while open."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    conn = await asyncpg.connect(asyncpg_dsn(url))

    def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        queue.put_nowait(payload)

    await conn.add_listener(channel, on_notify)
    try:
        yield queue
    finally:
        await conn.remove_listener(channel, on_notify)
        await conn.close()
