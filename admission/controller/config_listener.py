"""The queue configuration every replica holds, kept fresh by PostgreSQL's LISTEN/NOTIFY.

The webhook answers by it on every replica, leader or not; the leader's steps reload it into the
core (``Changes.config``). The same connection hears the lease channel, so a released lease is
contested at once, and its pings tell the database's health every second. A lost connection is
made again with a backoff, and whatever changed meanwhile is loaded on reconnecting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.readiness import DatabaseHealth
from admission.controller.watch.changes import Changes
from admission.store import config as config_store
from admission.store import database, notify
from queues.model import Config

log = logging.getLogger(__name__)

LISTEN_ERRORS: tuple[type[BaseException], ...] = (*database.ERRORS, notify.ListenerLost)


class ConfigListener:
    """Listens, loads the configuration, and tells its watchers."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        database_url: str,
        health: DatabaseHealth,
        changes: Changes,
        *,
        wake_election: Callable[[], None],
        configured: Callable[[Config | None], None],
    ) -> None:
        self.sessions = sessions
        self.database_url = database_url
        self.database = health
        self.changes = changes
        self.wake_election = wake_election  # a lease NOTIFY: an election round now
        self.configured = configured  # told first of every configuration (placement's topologies)
        self.config: Config | None = None
        self.watchers: list[Callable[[], None]] = []  # (the webhooks' scope)

    async def listen(self) -> None:
        """Configuration NOTIFY -> a fresh ``config`` (for the webhook, on every replica) and a step;
        lease NOTIFY -> an election round now. A lost connection is noticed (``ListenerLost``) and
        re-made; whatever changed meanwhile is loaded on reconnecting."""
        backoff = 0.5
        while True:
            try:
                names = (config_store.NOTIFY_CHANNEL, notify.LEASE_CHANNEL)
                # (its pings tell the database's health every second, leading or not)
                async with notify.listen(self.database_url, names, answered=self.database.succeeded) as ls:
                    await self.load()  # whatever happened before or while not listening
                    self.wake_election()
                    backoff = 0.5
                    while True:
                        self.changes.config = True
                        self.changes.wake.set()
                        while True:
                            channels = {(await ls.get())[0]} | {c for c, _ in ls.pending()}
                            if notify.LEASE_CHANNEL in channels:
                                self.wake_election()
                            if config_store.NOTIFY_CHANNEL in channels:
                                break
                        await self.load()
            except LISTEN_ERRORS as exc:
                self.database.failed("listening for configuration changes", database.describe_error(exc))
            except Exception:  # a bug must not silence configuration changes for good
                log.exception("configuration listener failed; starting it again")
            await asyncio.sleep(backoff)
            backoff = min(5.0, backoff * 2)

    async def load(self) -> None:
        async with database.transaction(self.sessions) as session:
            self.config = await config_store.load_config(session)
        self.database.succeeded()
        self.tell()

    def tell(self) -> None:
        """Tell placement and every watcher the configuration (or the leadership) changed."""
        self.configured(self.config)
        for watcher in self.watchers:
            try:
                watcher()
            except Exception:  # a watcher's bug must not stop configuration loading
                log.exception("configuration watcher failed")
