"""The parts of a card the leader read off the cluster's DRA devices, in PostgreSQL for the CLI
(``admission.store.card_fractions``): replaced whole, written by the leader only, and billed by
``turnstile usage`` under the operator's own fractions."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.store import card_fractions, database, lease

H200_MEMORY = Fraction(1, 140 * 2**30)


async def test_recorded_whole_replaced_and_fenced(sessions: async_sessionmaker[AsyncSession]) -> None:
    async with database.transaction(sessions) as s:
        old = await lease.acquire(s, holder="replica-1", ttl=dt.timedelta(seconds=-1))  # (expires at once)
        assert old is not None
        assert await card_fractions.get(s) == {}
        await card_fractions.put(s, {"gpu.memory": H200_MEMORY, "mig-1g": Fraction(1, 7)}, fence=old)
    async with database.transaction(sessions) as s:
        assert await card_fractions.get(s) == {"gpu.memory": H200_MEMORY, "mig-1g": Fraction(1, 7)}
        # the devices changed: what they no longer say is gone, the rest replaced
        await card_fractions.put(s, {"mig-1g": Fraction(1, 4), "x" * 60: Fraction(1)}, fence=old)
    async with database.transaction(sessions) as s:
        assert await card_fractions.get(s) == {"mig-1g": Fraction(1, 4)}  # (a name too long for a key: not kept)
        await card_fractions.put(s, {}, fence=old)
    async with database.transaction(sessions) as s:
        assert await card_fractions.get(s) == {}
        await card_fractions.put(s, {"mig-1g": Fraction(1, 7)}, fence=old)
    async with database.transaction(sessions) as s:
        new = await lease.acquire(s, holder="replica-2", ttl=dt.timedelta(minutes=1))
    assert new is not None
    with pytest.raises(lease.Fenced):  # a deposed leader records nothing
        async with database.transaction(sessions) as s:
            await card_fractions.put(s, {"mig-1g": Fraction(1, 2)}, fence=old)
    async with database.transaction(sessions) as s:
        assert await card_fractions.get(s) == {"mig-1g": Fraction(1, 7)}
