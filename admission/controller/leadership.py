"""Leader election: one replica schedules at a time, takes over within seconds, and steps down cleanly.

The lease is a row in PostgreSQL with a fencing token (``admission.store.lease``). The loop here
renews it every third of its TTL and turns what it learns into terms: a new token begins a term
(``begin``), a lost or unconfirmed lease ends it (``end``). Rules, each from a fault seen on a
real cluster:

1. A replica asks for the lease only once its informers have listed every job (``can_lead``):
   a term compares the store with the cluster, and starting it on a half-listed cluster would
   both stall it and mistake unlisted jobs for gone ones.
2. Every database call is bounded (``timeout``, a third of the TTL): a black-holed connection
   fails the round instead of hanging it, so an unrenewable lease ends the term in time.
3. After a term begins, the lease is confirmed again at once rather than a third of a TTL later:
   loading a large snapshot takes seconds, and a term whose lease looks unconfirmed does not act.
4. Stepping down (``release``) is fenced (only our own token's row) and announced with ``NOTIFY
   turnstile_lease``; standbys listen (``wake``) and take over within a second, not a TTL later.
   After a failed round the loop retries quickly, so a recovered database is used at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.controller.readiness import DatabaseHealth
from admission.store import database, lease, notify

log = logging.getLogger(__name__)

DB_ERRORS = (OperationalError, DBAPIError, OSError, TimeoutError)
RETRY_SECONDS = 0.5  # after a failed round


class Leadership:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        identity: str,
        ttl: float,
        database: DatabaseHealth,
        can_lead: Callable[[], bool],
        begin: Callable[[lease.Fence, float], Awaitable[bool]],
        end: Callable[[str], Awaitable[None]],
        leading: Callable[[], lease.Fence | None],
        confirm: Callable[[float], None],
    ) -> None:
        self.sessions = sessions
        self.identity = identity
        self.ttl = ttl
        self.database = database
        self.can_lead = can_lead
        self.begin = begin  # start a term for this fence (lease confirmed at the given monotonic time)
        self.end = end  # end the current term, saying why
        self.leading = leading  # the current term's fence, if any
        self.confirm = confirm  # the lease was renewed at this monotonic time
        self.fence: lease.Fence | None = None  # the last fence we held
        self.confirmed_at = 0.0  # monotonic start of the last round that renewed the lease
        self.standing_by = False  # said so already
        self.look = asyncio.Event()  # look again now (a lease NOTIFY, informers synced)

    def wake(self) -> None:
        self.look.set()

    async def run(self) -> None:
        """Until cancelled: renew or acquire, and begin or end terms accordingly."""
        while True:
            pause = await self._round()
            self.look.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self.look.wait()

    async def _round(self) -> float:
        """One election round; returns how long to wait before the next."""
        if not self.can_lead():
            return 0.1
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.ttl / 3):
                fence = await self._acquire()
        except DB_ERRORS as exc:
            self.database.failed("renewing the scheduler lease", database.describe_error(exc))
            if self.leading() is not None and time.monotonic() > self.confirmed_at + self.ttl * 0.8:
                await self.end("the lease could not be renewed in time (the database does not answer)")
            return RETRY_SECONDS
        self.database.succeeded()
        current = self.leading()
        if fence is None:
            if current is not None:
                await self.end("another replica holds the lease")
            if not self.standing_by:
                log.info("standing by: another replica holds the scheduler lease")
                self.standing_by = True
            return self.ttl / 3
        self.standing_by = False
        self.fence, self.confirmed_at = fence, started
        if current != fence:
            if current is not None:
                await self.end("a new term")
            if not await self.begin(fence, started):
                return RETRY_SECONDS
            return 0.0  # confirm at once: beginning took time
        self.confirm(started)
        return self.ttl / 3

    async def _acquire(self) -> lease.Fence | None:
        async with database.transaction(self.sessions) as session:
            return await lease.acquire(session, holder=self.identity, ttl=dt.timedelta(seconds=self.ttl))

    async def release(self) -> bool:
        """Give the lease up (fenced: only while it is still ours) and tell the standbys; True if released."""
        fence = self.fence
        if fence is None:
            return False
        self.fence = None
        try:
            async with database.transaction(self.sessions) as session:
                if not await lease.release(session, fence, channel=notify.LEASE_CHANNEL):
                    return False
        except DB_ERRORS as exc:
            why = database.describe_error(exc)
            log.warning("could not release the scheduler lease (%s); a standby takes over when it expires", why)
            return False
        log.info("released the scheduler lease (term %d)", fence.token)
        return True
