"""The parts of a card the leader read off the cluster's devices, kept for whoever bills GPU-hours.

A DRA-mapped resource's part of a GPU card (``whole-gpus``: 1, ``gpu.memory``: 1/140Gi on H200s)
is read off the ResourceSlices (``queues.dra.card_shares``), which only the controller watches.
``turnstile usage``, ``budget`` and ``describe`` run elsewhere and read PostgreSQL, so the leader
records them here, one ``settings`` row each (``card-fraction/<resource>``: ``1/7``), in its
step's fenced transaction whenever they change, and readers take them under their own
``TURNSTILE_GPU_FRACTIONS`` and ``--fraction`` (which always win). A resource whose name is too long
for a settings key is not recorded (the controller logs it); it is billed where
``TURNSTILE_GPU_FRACTIONS`` names it, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from fractions import Fraction

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import lease, tables

log = logging.getLogger(__name__)

PREFIX = "card-fraction/"
KEY_LENGTH = 63  # tables.Setting.key


async def put(session: AsyncSession, fractions: Mapping[str, Fraction], *, fence: lease.Fence) -> None:
    """Record ``fractions`` as the devices' parts of a card, replacing what was recorded before."""
    await lease.check(session, fence)
    keys = {}
    for resource, fraction in sorted(fractions.items()):
        key = PREFIX + resource
        if len(key) > KEY_LENGTH:
            log.warning(
                "%s's part of a card (%s) is not recorded for turnstile usage: name too long", resource, fraction
            )
            continue
        keys[key] = str(fraction)
    gone = delete(tables.Setting).where(tables.Setting.key.startswith(PREFIX, autoescape=True))
    if keys:
        gone = gone.where(tables.Setting.key.not_in(list(keys)))
    await session.execute(gone)
    for key, value in keys.items():
        stmt = insert(tables.Setting).values(key=key, value=value)
        await session.execute(
            stmt.on_conflict_do_update(
                index_elements=[tables.Setting.key], set_={"value": value, "updated_at": func.now()}
            )
        )


async def billed(session: AsyncSession, overrides: Mapping[str, Fraction]) -> dict[str, Fraction]:
    """What GPU-hours are billed with: what the leader recorded, under the caller's own fractions
    (``TURNSTILE_GPU_FRACTIONS``, ``--fraction``), which always win."""
    return {**await get(session), **overrides}


async def get(session: AsyncSession) -> dict[str, Fraction]:
    """What the leader last recorded (a value that does not read as a fraction is left out)."""
    rows = await session.execute(
        select(tables.Setting.key, tables.Setting.value).where(tables.Setting.key.startswith(PREFIX, autoescape=True))
    )
    out: dict[str, Fraction] = {}
    for key, value in rows:
        try:
            fraction = Fraction(value)
        except (ValueError, ZeroDivisionError):
            continue
        if fraction > 0:
            out[key.removeprefix(PREFIX)] = fraction
    return out
