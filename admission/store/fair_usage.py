"""Admission fair sharing's history in PostgreSQL: each LocalQueue's decayed usage.

The scheduling core keeps the history (``queues.usage_history``) and says which LocalQueues' moved
(``UsageHistory.changed``); the controller's step writes those rows in a fenced transaction, and a
new term reads them all back before it restores the admitted workloads. Kueue keeps this history in
memory and in the LocalQueue's status; here a restart or a fail-over loses none of it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import lease, tables

History = dict[str, tuple[dict[str, float], float]]  # LocalQueue key -> (consumed, as of epoch seconds)


async def load(session: AsyncSession) -> History:
    rows = (await session.execute(select(tables.LocalQueueUsage))).scalars()
    return {r.local_queue: ({str(k): float(v) for k, v in r.consumed.items()}, r.updated_at.timestamp()) for r in rows}


async def save(
    session: AsyncSession, history: Mapping[str, tuple[Mapping[str, float], float]], *, fence: lease.Fence
) -> None:
    """Write each LocalQueue's history (upsert), if ``fence`` still holds the lease."""
    if not history:
        return
    await lease.check(session, fence)
    rows = [
        {"local_queue": key, "consumed": dict(consumed), "updated_at": dt.datetime.fromtimestamp(at, dt.UTC)}
        for key, (consumed, at) in sorted(history.items())
    ]
    stmt = insert(tables.LocalQueueUsage).values(rows)
    await session.execute(
        stmt.on_conflict_do_update(
            index_elements=[tables.LocalQueueUsage.local_queue],
            set_={"consumed": stmt.excluded.consumed, "updated_at": stmt.excluded.updated_at},
        )
    )
