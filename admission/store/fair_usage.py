"""Fair sharing's history in PostgreSQL: each queue's decayed usage.

The scheduling core keeps the histories (``queues.usage_history``: LocalQueues' for admission fair
sharing, keys ``namespace/name``; ClusterQueues' for usage-aware fair sharing, keys their names)
and says which moved (``UsageHistory.changed``); the controller's step writes those rows in a
fenced transaction, and a new term reads them all back before it restores the admitted workloads.
Kueue keeps the LocalQueues' history in memory and in their status; here a restart or a fail-over
loses none of it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import lease, tables

History = dict[str, tuple[dict[str, float], float]]  # queue key -> (consumed, as of epoch seconds)


async def load(session: AsyncSession) -> History:
    rows = (await session.execute(select(tables.UsageHistory))).scalars()
    return {r.queue: ({str(k): float(v) for k, v in r.consumed.items()}, r.updated_at.timestamp()) for r in rows}


async def save(
    session: AsyncSession, history: Mapping[str, tuple[Mapping[str, float], float]], *, fence: lease.Fence
) -> None:
    """Write each queue's history (upsert), if ``fence`` still holds the lease."""
    if not history:
        return
    await lease.check(session, fence)
    rows = [
        {"queue": key, "consumed": dict(consumed), "updated_at": dt.datetime.fromtimestamp(at, dt.UTC)}
        for key, (consumed, at) in sorted(history.items())
    ]
    stmt = insert(tables.UsageHistory).values(rows)
    await session.execute(
        stmt.on_conflict_do_update(
            index_elements=[tables.UsageHistory.queue],
            set_={"consumed": stmt.excluded.consumed, "updated_at": stmt.excluded.updated_at},
        )
    )
