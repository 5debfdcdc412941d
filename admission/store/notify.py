"""LISTEN for configuration and leadership changes: a wake-up hint, never the only trigger.

``config.apply``/``delete`` send ``NOTIFY turnstile_config, 'Kind/name'`` inside their
transaction, so listeners hear of a change only once it is committed; a leader that steps down
sends ``NOTIFY turnstile_lease`` so a standby takes over at once instead of at its next round.

A LISTEN connection can die without a word: reset by a proxy, terminated by an admin, or
black-holed so that nothing arrives and nothing fails. ``Listener.get`` therefore raises
``ListenerLost`` when asyncpg reports the connection closed *and* when a periodic ``SELECT 1``
does not answer in time; the caller reconnects and reloads what it may have missed. A listener
must still poll now and then: notifications sent while it was away are not replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from admission import urls
from admission.store.config import NOTIFY_CHANNEL

LEASE_CHANNEL = "turnstile_lease"
# How often the LISTEN connection is checked, and how slow an answer means it is lost: a black-holed
# network is noticed within PING_SECONDS + PING_TIMEOUT (the lease's own rounds are a third of its TTL)
PING_SECONDS = 1.0
PING_TIMEOUT = 2.0


class ListenerLost(Exception):
    """The LISTEN connection is gone (or stopped answering); notifications may have been missed."""


def asyncpg_dsn(url: str) -> str:
    """The plain libpq-style DSN asyncpg wants, from a SQLAlchemy URL."""
    return urls.asyncpg_dsn(url)


class Listener:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.queue: asyncio.Queue[tuple[str, str] | BaseException] = asyncio.Queue()
        self.lost = False  # the connection stopped answering: dropped at once, not closed politely

    def on_notify(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        self.queue.put_nowait((channel, payload))

    def on_terminate(self, _conn: Any) -> None:
        self.queue.put_nowait(ListenerLost("the database closed the LISTEN connection"))

    async def get(self) -> tuple[str, str]:
        """The next notification as ``(channel, payload)``; ``ListenerLost`` if the connection died."""
        item = await self.queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def pending(self) -> list[tuple[str, str]]:
        """Notifications already queued (a burst of edits is handled once); raises like ``get``."""
        out = []
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if isinstance(item, BaseException):
                raise item
            out.append(item)
        return out

    async def watch(self, every: float, timeout: float, answered: Callable[[], None] | None = None) -> None:
        """Ping the connection every ``every`` seconds; ``answered`` is told of each answer (the
        database is up), the queue of a lost connection (``ListenerLost``)."""
        while True:
            await asyncio.sleep(every)
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the cancellation
                # that stops this task if it arrives as the ping answers (gh-86296), and the
                # listener's shutdown would then wait for this loop for ever.
                async with asyncio.timeout(timeout):
                    await self.conn.fetchval("SELECT 1")
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                reason = "did not answer" if isinstance(exc, TimeoutError) else f"failed ({exc})"
                self.lost = True
                self.queue.put_nowait(ListenerLost(f"the LISTEN connection {reason} within {timeout:.0f}s"))
                return
            if answered is not None:
                answered()


@asynccontextmanager
async def listen(
    url: str,
    channels: Sequence[str] = (NOTIFY_CHANNEL,),
    *,
    ping_every: float = PING_SECONDS,
    ping_timeout: float = PING_TIMEOUT,
    answered: Callable[[], None] | None = None,
) -> AsyncIterator[Listener]:
    """A listener for ``channels`` while the block runs (see the module docstring)."""
    conn = await asyncpg.connect(asyncpg_dsn(url), **urls.asyncpg_options(url))
    listener = Listener(conn)
    conn.add_termination_listener(listener.on_terminate)
    watching: asyncio.Task[None] | None = None
    try:
        for channel in channels:
            await conn.add_listener(channel, listener.on_notify)
        watching = asyncio.create_task(listener.watch(ping_every, ping_timeout, answered), name="listen-ping")
        yield listener
    finally:
        if watching is not None:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        conn.remove_termination_listener(listener.on_terminate)
        if not listener.lost:  # (a connection that stopped answering would not answer a goodbye either)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await conn.close()
        if not conn.is_closed():
            conn.terminate()
