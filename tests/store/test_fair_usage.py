"""Admission fair sharing's history in PostgreSQL: written by the leader only, read back whole."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.store import database, fair_usage, lease

GPU = "nvidia.com/gpu"


async def test_history_round_trips_and_a_deposed_leader_writes_nothing(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    async with database.transaction(sessions) as s:
        old = await lease.acquire(s, holder="replica-1", ttl=dt.timedelta(seconds=-1))  # already expired
    assert old is not None
    async with database.transaction(sessions) as s:
        await fair_usage.save(s, {"ml/a": ({GPU: 2.5, "cpu": 0.125}, 1_700_000_000.5)}, fence=old)
    async with database.transaction(sessions) as s:
        await fair_usage.save(s, {"ml/a": ({GPU: 3.0}, 1_700_000_060.0), "ml/b": ({}, 1_700_000_060.0)}, fence=old)
        assert await fair_usage.load(s) == {
            "ml/a": ({GPU: 3.0}, 1_700_000_060.0),  # upserted: the newer history replaces the older
            "ml/b": ({}, 1_700_000_060.0),
        }
    async with database.transaction(sessions) as s:
        new = await lease.acquire(s, holder="replica-2", ttl=dt.timedelta(minutes=1))
    assert new is not None
    with pytest.raises(lease.Fenced):
        async with database.transaction(sessions) as s:
            await fair_usage.save(s, {"ml/a": ({GPU: 99.0}, 1_700_000_120.0)}, fence=old)
    async with database.transaction(sessions) as s:
        assert (await fair_usage.load(s))["ml/a"] == ({GPU: 3.0}, 1_700_000_060.0)


async def test_the_leader_records_the_settings_a_plan_depends_on(sessions: async_sessionmaker[AsyncSession]) -> None:
    """``describe workload`` plans as the controller would: with its fair sharing and its
    quotaCheckStrategy, as the leader last recorded them."""
    async with database.transaction(sessions) as s:
        fence = await lease.acquire(s, holder="replica-1", ttl=dt.timedelta(minutes=1))
        assert fence is not None
        assert not await fair_usage.ignores_undeclared(s), "nothing recorded: Kueue's default"
        await fair_usage.put_setting(s, None, fence=fence, ignore_undeclared=True)
    async with database.transaction(sessions) as s:
        assert await fair_usage.ignores_undeclared(s) and await fair_usage.get_setting(s) == ""
        await fair_usage.put_setting(s, None, fence=fence)
    async with database.transaction(sessions) as s:
        assert not await fair_usage.ignores_undeclared(s)
