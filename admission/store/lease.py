"""Leader lease with a fencing token: one scheduler writes; a paused ex-leader cannot.

``acquire`` takes or renews the lease row; whenever the holder changes, the token grows.
Every write of the scheduler first calls ``check`` with its ``Fence``: it locks the lease row
in share mode and fails with ``Fenced`` unless the row still carries the writer's token, so a
new leader's takeover (which updates the row) waits for in-flight writes of the old one and
makes every later write of the old one fail.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import tables
from admission.store.queries import query

SCHEDULER = "scheduler"


class Fenced(Exception):
    """This process is no longer the leader; it must stop writing. A permanent error."""


@dataclass(frozen=True, slots=True)
class Fence:
    name: str
    holder: str
    token: int


async def acquire(session: AsyncSession, *, holder: str, ttl: dt.timedelta, name: str = SCHEDULER) -> Fence | None:
    """Take the lease if it is free, expired or ours; None if someone else holds it.

    Waits at most a third of ``ttl`` for the row's lock (a leader's in-flight write holds it in
    share mode), so an election round never hangs; the lock timeout raises like any database error.
    """
    millis = max(1, int(ttl.total_seconds() * 1000 / 3))
    await session.execute(query("lease_lock_timeout"), {"millis": str(millis)})
    row = await session.execute(
        query("lease_acquire"),
        {"name": name, "holder": holder, "ttl": ttl},
    )
    token = row.scalar_one_or_none()
    return None if token is None else Fence(name, holder, int(token))


async def check(session: AsyncSession, fence: Fence) -> None:
    lease = tables.LeaderLease
    found = await session.execute(
        select(lease.fencing_token)
        .where(lease.name == fence.name, lease.holder == fence.holder, lease.fencing_token == fence.token)
        .with_for_update(read=True)
    )
    if found.scalar_one_or_none() is None:
        raise Fenced(f"{fence.holder} lost the {fence.name} lease (token {fence.token}); it must stop writing")


async def release(session: AsyncSession, fence: Fence, *, channel: str) -> bool:
    """Give the lease up while it is still ``fence``'s (it expires a millisecond ago) and NOTIFY
    ``channel`` so the standbys contest it at once; False if it was no longer ours."""
    released = await session.execute(
        query("lease_release"),
        {"n": fence.name, "h": fence.holder, "t": fence.token},
    )
    if released.rowcount != 1:  # type: ignore[attr-defined]
        return False
    await session.execute(query("notify"), {"channel": channel, "payload": f"released {fence.token}"})
    return True
