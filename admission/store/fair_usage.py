"""Fair sharing's history in PostgreSQL: each queue's decayed usage.

The scheduling core keeps the histories (``queues.cycle.usage_history``: LocalQueues' for admission fair
sharing, keys ``namespace/name``; ClusterQueues' for usage-aware fair sharing, keys their names)
and says which moved (``UsageHistory.changed``); the controller's step writes those rows in a
fenced transaction, and a new term reads them all back before it restores the admitted workloads.
Kueue keeps the LocalQueues' history in memory and in their status; here a restart or a fail-over
loses none of it.

The leader also records the settings a plan depends on (``settings`` rows: its fair-sharing
block, ``SETTING``, and Kueue's quotaCheckStrategy, ``QUOTA_CHECK``), so that ``turnstile describe
workload`` plans preemption as the controller would.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import lease, tables
from queues.kueue import fair_sharing_config
from queues.kueue.fair_sharing_config import FairSharing
from queues.podsets import transformations

SETTING = "fair_sharing"  # the controller's fairSharing block as JSON; "" when off
QUOTA_CHECK = "quota_check_strategy"  # Kueue's resources.quotaCheckStrategy the controller runs with
History = dict[str, tuple[dict[str, float], float]]  # queue key -> (consumed, as of epoch seconds)


def _entry(row: tables.UsageHistory) -> tuple[dict[str, float], float]:
    return {str(k): float(v) for k, v in row.consumed.items()}, row.updated_at.timestamp()


async def load(session: AsyncSession) -> History:
    """Every queue's stored history (a new term takes them all back)."""
    return {r.queue: _entry(r) for r in (await session.execute(select(tables.UsageHistory))).scalars()}


async def get(session: AsyncSession, queue: str) -> tuple[dict[str, float], float] | None:
    """One queue's stored history (consumed, as of epoch seconds); None if it has none."""
    row = await session.get(tables.UsageHistory, queue, populate_existing=True)
    return None if row is None else _entry(row)


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


async def put_setting(
    session: AsyncSession, fair: FairSharing | None, *, fence: lease.Fence, ignore_undeclared: bool = False
) -> None:
    """Record the leader's fair-sharing setting (Kueue's block, as JSON; "" when off) and its
    quotaCheckStrategy."""
    await lease.check(session, fence)
    value = "" if fair is None else json.dumps(fair_sharing_config.block(fair))
    strategy = transformations.IGNORE_UNDECLARED if ignore_undeclared else transformations.BLOCK_UNDECLARED
    for key, text in ((SETTING, value), (QUOTA_CHECK, strategy)):
        stmt = insert(tables.Setting).values(key=key, value=text)
        await session.execute(
            stmt.on_conflict_do_update(
                index_elements=[tables.Setting.key], set_={"value": text, "updated_at": func.now()}
            )
        )


async def ignores_undeclared(session: AsyncSession) -> bool:
    """Whether the leader last recorded quotaCheckStrategy IgnoreUndeclared."""
    row = await session.get(tables.Setting, QUOTA_CHECK, populate_existing=True)
    return row is not None and row.value == transformations.IGNORE_UNDECLARED


async def get_setting(session: AsyncSession) -> str:
    """The fair-sharing setting the leader last recorded ("" when off or never recorded)."""
    row = await session.get(tables.Setting, SETTING, populate_existing=True)
    return row.value if row is not None else ""
