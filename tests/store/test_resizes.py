"""An elastic job's resize committed (``admission.store.workloads.resize``), on real PostgreSQL.

Its quota rows, pod sets and ledger follow the new size in the step's transaction; a growth that
no longer fits under the trees' locks is refused, and nothing of it is written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.store import database, tables
from admission.store import workloads as store
from queues.model import Admission
from tests.store.test_workloads import GPU, NOW, admit, cq, record, setup


def resize(wid: int, gpus: int) -> store.Resize:
    pod_sets = tuple(dataclasses.replace(ps, count=gpus) for ps in record(0).job.pod_sets)
    return store.Resize(wid, Admission("a", {"main": {GPU: "a100"}}, {("a100", GPU): gpus * 1000}, False), pod_sets)


async def test_a_scale_down_frees_quota_in_the_same_commit_and_splits_the_ledger(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    ids = await setup(sessions, [cq("a", 4, cohort=None)], 2)
    async with database.transaction(sessions) as s:
        await store.commit_cycle(s, admissions=[admit(ids[0], "a", 4)], now=NOW)
    later = NOW + dt.timedelta(hours=1)
    async with database.transaction(sessions) as s:
        # the resize frees 3 GPUs, which the other's admission takes in the same commit
        result = await store.commit_cycle(s, admissions=[admit(ids[1], "a", 3)], resizes=[resize(ids[0], 1)], now=later)
    assert (result.admitted, result.refused) == ([ids[1]], [])
    async with database.transaction(sessions) as s:
        held = dict((await s.execute(select(tables.Admission.workload_id, tables.Admission.quantity))).all())
        ledger = (await s.execute(select(tables.UsageInterval).order_by(tables.UsageInterval.id))).scalars().all()
        snap = await store.load_snapshot(s)
        history = await store.events(s)
    assert held == {ids[0]: 1000, ids[1]: 3000}
    assert [(r.workload_id, r.quantity, r.started_at, r.ended_at) for r in ledger] == [
        (ids[0], 4000, NOW, later),  # 4 GPUs for an hour
        (ids[0], 1000, later, None),  # then 1 (written first: its freed quota is the admission's)
        (ids[1], 3000, later, None),
    ]
    resized = next(w for w in snap.workloads if w.key == "team/job-0")
    assert [ps.count for ps in resized.pod_sets] == [1], "a restart sees it at its new size"
    assert resized.admission is not None and resized.admission.usage == {("a100", GPU): 1000}
    assert [(e.workload, e.type, e.counts) for e in history if e.at == later] == [
        ("team/job-0", "Resized", {"main": 1}),
        ("team/job-1", "Admitted", None),
    ]


async def test_a_growth_that_no_longer_fits_is_refused_and_nothing_of_it_is_written(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    ids = await setup(sessions, [cq("a", 4, cohort=None)], 2)
    async with database.transaction(sessions) as s:
        await store.commit_cycle(s, admissions=[admit(ids[0], "a", 2), admit(ids[1], "a", 2)], now=NOW)
    later = NOW + dt.timedelta(minutes=5)
    async with database.transaction(sessions) as s:
        result = await store.commit_cycle(s, admissions=[], resizes=[resize(ids[0], 3)], now=later)
    assert result.refused == [ids[0]]
    async with database.transaction(sessions) as s:
        held = dict((await s.execute(select(tables.Admission.workload_id, tables.Admission.quantity))).all())
        open_ = (await s.execute(select(tables.UsageInterval).where(tables.UsageInterval.ended_at.is_(None)))).scalars()
        history = await store.events(s)
    assert held == {ids[0]: 2000, ids[1]: 2000}
    assert sorted((r.workload_id, r.quantity, r.started_at) for r in open_) == [
        (ids[0], 2000, NOW),
        (ids[1], 2000, NOW),
    ]
    assert "Resized" not in {e.type for e in history}
    async with database.transaction(sessions) as s:  # its own usage counts as freed: 2 -> 2 + 0 more fits
        grown = await store.commit_cycle(s, admissions=[], resizes=[resize(ids[1], 2)], now=later)
    assert grown.refused == []
