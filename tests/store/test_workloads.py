"""Workloads in PostgreSQL: upsert, snapshot, fenced cycle commits that never over-commit, the ledger."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.store import config as config_store
from admission.store import database, lease, tables
from admission.store import workloads as store
from queues.kueue import api, codec
from queues.model import Admission
from queues.podsets import jobs

GPU = "nvidia.com/gpu"
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def cq(name: str, gpus: int, cohort: str | None = "shared", borrowing_limit: int | None = None) -> api.KueueObject:
    quota: dict[str, Any] = {"name": GPU, "nominalQuota": str(gpus)}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = str(borrowing_limit)
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": "a100", "resources": [quota]}]}],
    }
    if cohort:
        spec["cohort"] = cohort
    return codec.parse(
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}
    )


def record(i: int, gpus: int = 1, ns: str = "team", labels: dict[str, str] | None = None) -> store.Record:
    job = jobs.read_job(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"job-{i}",
                "namespace": ns,
                "labels": {"kueue.x-k8s.io/queue-name": "q", **(labels or {})},
            },
            "spec": {
                "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: str(gpus)}}}]}}
            },
        }
    )
    return store.Record(job_uid=f"uid-{ns}-{i}", job=job, local_queue="q", priority=0, created_at=NOW)


def admit(wid: int, cq_name: str, gpus: int) -> store.Admit:
    return store.Admit(wid, Admission(cq_name, {"main": {GPU: "a100"}}, {("a100", GPU): gpus * 1000}, False))


async def setup(
    sessions: async_sessionmaker[AsyncSession], queues: list[api.KueueObject], n: int, gpus: int = 1
) -> list[int]:
    async with database.transaction(sessions) as s:
        await config_store.apply(s, queues, actor="test")
        await store.upsert(s, [record(i, gpus) for i in range(n)])
    async with database.transaction(sessions) as s:
        snap = await store.load_snapshot(s)
    return [snap.ids[f"team/job-{i}"] for i in range(n)]


async def test_upsert_is_idempotent_and_keeps_admitted_rows(sessions: async_sessionmaker[AsyncSession]) -> None:
    ids = await setup(sessions, [cq("a", 8, cohort=None)], 3)
    async with database.transaction(sessions) as s:
        await store.commit_cycle(s, admissions=[admit(ids[0], "a", 1)], now=NOW)
    async with database.transaction(sessions) as s:
        changed = [store.Record(r.job_uid, r.job, "other", 7, r.created_at) for r in (record(0), record(1))]
        await store.upsert(s, changed)
        await store.upsert(s, changed)
    async with database.transaction(sessions) as s:
        rows = {r.name: r for r in (await s.execute(select(tables.Workload))).scalars()}
    assert len(rows) == 3
    assert (rows["job-0"].local_queue, rows["job-0"].state) == ("q", "Admitted")  # admitted rows untouched
    assert (rows["job-1"].local_queue, rows["job-1"].priority) == ("other", 7)


async def test_snapshot_round_trips_pod_sets_and_usage(sessions: async_sessionmaker[AsyncSession]) -> None:
    ids = await setup(sessions, [cq("a", 8, cohort=None)], 2, gpus=3)
    async with database.transaction(sessions) as s:
        await store.commit_cycle(s, admissions=[admit(ids[0], "a", 3)], now=NOW)
        snap = await store.load_snapshot(s)
    by_key = {w.key: w for w in snap.workloads}
    admitted, pending = by_key["team/job-0"], by_key["team/job-1"]
    assert admitted.admission is not None and admitted.admission.usage == {("a100", GPU): 3000}
    assert admitted.admission.flavors == {"main": {GPU: "a100"}}
    assert pending.admission is None and pending.pod_sets == record(1, 3).job.pod_sets
    assert "a" in snap.config.cluster_queues


async def test_a_topology_placement_and_the_topology_round_trip(sessions: async_sessionmaker[AsyncSession]) -> None:
    racks = codec.parse(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "racks"},
         "spec": {"levels": [{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}}
    )  # fmt: skip
    ids = await setup(sessions, [cq("a", 8, cohort=None), racks], 1, gpus=2)
    placed = Admission("a", {"main": {GPU: "a100"}}, {("a100", GPU): 2000}, False, {}, {"main": {"r0-n1": 1}})
    async with database.transaction(sessions) as s:
        await store.commit_cycle(s, admissions=[store.Admit(ids[0], placed)], now=NOW)
        snap = await store.load_snapshot(s)
    admission = snap.workloads[0].admission
    assert admission is not None and admission.placement == {"main": {"r0-n1": 1}}
    assert snap.config.topologies["racks"].levels == ("rack", "kubernetes.io/hostname")


async def test_commit_refuses_what_no_longer_fits_and_keeps_the_ledger(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    ids = await setup(sessions, [cq("a", 4, cohort=None)], 3, gpus=2)
    async with database.transaction(sessions) as s:
        result = await store.commit_cycle(s, admissions=[admit(i, "a", 2) for i in ids], now=NOW)
    assert (result.admitted, result.refused) == (ids[:2], ids[2:])
    later = NOW + dt.timedelta(hours=2)
    async with database.transaction(sessions) as s:
        evicted = await store.commit_cycle(
            s, admissions=[admit(ids[2], "a", 2)], evictions=[store.Evict(ids[0], "Preempted")], now=later
        )
        await store.finish(s, [ids[1]], now=later)
    assert (evicted.evicted, evicted.admitted) == ([ids[0]], [ids[2]])
    async with database.transaction(sessions) as s:
        ledger = (await s.execute(select(tables.UsageInterval).order_by(tables.UsageInterval.id))).scalars().all()
        states = dict((await s.execute(select(tables.Workload.id, tables.Workload.state))).all())
    assert [(r.workload_id, r.quantity, r.ended_at) for r in ledger] == [
        (ids[0], 2000, later),
        (ids[1], 2000, later),
        (ids[2], 2000, None),
    ]
    assert states == {ids[0]: "Pending", ids[1]: "Finished", ids[2]: "Admitted"}
    async with database.transaction(sessions) as s:
        again = await store.finish(s, [ids[1]], now=later + dt.timedelta(hours=1))
        history = await store.events(s)
    assert again == [], "a finished workload finishes exactly once"
    assert [(e.workload, e.type, e.at, e.cluster_queue, e.reason, e.flavors) for e in history] == [
        ("team/job-0", "Admitted", NOW, "a", None, {"main": {GPU: "a100"}}),
        ("team/job-1", "Admitted", NOW, "a", None, {"main": {GPU: "a100"}}),
        ("team/job-0", "Evicted", later, "a", "Preempted", None),
        ("team/job-2", "Admitted", later, "a", None, {"main": {GPU: "a100"}}),
        ("team/job-1", "Finished", later, "a", "JobFinished", None),
    ]


async def test_one_cycle_admits_and_finishes_more_than_a_statement_has_parameters(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # PostgreSQL binds at most 32,767 parameters per statement; a quota raise on 1,000 queues
    # admits 50,000 workloads in one cycle, which once failed (and was retried) forever.
    n = 33_000
    ids = await setup(sessions, [cq("a", n, cohort=None)], n)
    async with database.transaction(sessions) as s:
        result = await store.commit_cycle(s, admissions=[admit(i, "a", 1) for i in ids], now=NOW)
    assert len(result.admitted) == n and not result.refused
    async with database.transaction(sessions) as s:
        finished = await store.finish(s, ids, now=NOW + dt.timedelta(hours=1))
        left = await s.scalar(select(func.count()).select_from(tables.Admission))
    assert finished == sorted(ids) and left == 0


async def test_a_fenced_ex_leader_cannot_write(sessions: async_sessionmaker[AsyncSession]) -> None:
    ids = await setup(sessions, [cq("a", 4, cohort=None)], 1)
    async with database.transaction(sessions) as s:
        old = await lease.acquire(s, holder="replica-1", ttl=dt.timedelta(seconds=-1))  # already expired
        assert old is not None and old.token == 1
    async with database.transaction(sessions) as s:
        assert await lease.acquire(s, holder="replica-1", ttl=dt.timedelta(seconds=-1)) == old  # renewal keeps token
        new = await lease.acquire(s, holder="replica-2", ttl=dt.timedelta(minutes=1))
        assert new is not None and new.token == 2
    async with database.transaction(sessions) as s:
        assert await lease.acquire(s, holder="replica-1", ttl=dt.timedelta(minutes=1)) is None  # held by replica-2
    with pytest.raises(lease.Fenced):
        async with database.transaction(sessions) as s:
            await store.commit_cycle(s, admissions=[admit(ids[0], "a", 1)], now=NOW, fence=old)
    async with database.transaction(sessions) as s:
        result = await store.commit_cycle(s, admissions=[admit(ids[0], "a", 1)], now=NOW, fence=new)
    assert result.admitted == ids


# ----- concurrent writers never over-commit -------------------------------------------------------


@st.composite
def races(draw: Any) -> dict[str, Any]:
    queues = [(f"cq{i}", draw(st.integers(0, 6)), draw(st.one_of(st.none(), st.integers(0, 4)))) for i in range(3)]
    writers = draw(
        st.lists(
            st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), min_size=1, max_size=6), min_size=2, max_size=5
        )
    )
    return {"queues": queues, "writers": writers}


def test_concurrent_commits_never_over_commit(new_database: Callable[[], str]) -> None:
    url = new_database()
    database.upgrade_sync(url)

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(races())
    def run(race: dict[str, Any]) -> None:
        asyncio.run(_race(url, race))

    run()


async def _race(url: str, race: dict[str, Any]) -> None:
    engine = database.make_engine(url, pool_size=6)
    factory = database.sessions(engine)
    try:
        async with database.transaction(factory) as s:
            for table in ("usage_ledger", "admissions", "workloads", "cluster_queue_quotas", "cluster_queues"):
                await s.execute(tables.Base.metadata.tables[table].delete())
            objs = [cq(name, gpus, borrowing_limit=limit) for name, gpus, limit in race["queues"]]
            await config_store.apply(s, objs, actor="test")
            records = [
                record(w * 100 + j, gpus)
                for w, batch in enumerate(race["writers"])
                for j, (_, gpus) in enumerate(batch)
            ]
            await store.upsert(s, records)
        async with database.transaction(factory) as s:
            ids = (await store.load_snapshot(s)).ids

        async def writer(w: int, batch: list[tuple[int, int]]) -> None:
            adm = [admit(ids[f"team/job-{w * 100 + j}"], f"cq{q}", g) for j, (q, g) in enumerate(batch)]
            async with database.transaction(factory) as s:
                await store.commit_cycle(s, admissions=adm, now=NOW)

        await asyncio.gather(*(writer(w, b) for w, b in enumerate(race["writers"])))
        async with database.transaction(factory) as s:
            used = dict(
                (
                    await s.execute(
                        select(tables.Admission.cluster_queue, func.sum(tables.Admission.quantity)).group_by(
                            tables.Admission.cluster_queue
                        )
                    )
                ).all()
            )
            admitted = (
                await s.execute(
                    select(func.count()).select_from(tables.Workload).where(tables.Workload.state == "Admitted")
                )
            ).scalar_one()
            intervals = (await s.execute(select(func.count()).select_from(tables.UsageInterval))).scalar_one()
        used = {k: int(v) // 1000 for k, v in used.items()}
        total_nominal = sum(g for _, g, _ in race["queues"])
        assert sum(used.values()) <= total_nominal, (used, race)
        for name, gpus, limit in race["queues"]:
            if limit is not None:
                assert used.get(name, 0) <= gpus + limit, (name, used, race)
        assert admitted == intervals  # one GPU interval per admitted workload
    finally:
        await engine.dispose()


async def test_database_errors_are_described_in_one_line(sessions: async_sessionmaker[AsyncSession]) -> None:
    with pytest.raises(DBAPIError) as caught:
        async with database.transaction(sessions) as s:
            await s.execute(text("SELECT 1 / 0 FROM generate_series(1, 3) WHERE :x = 1"), {"x": 1})
    assert "[SQL:" in str(caught.value)  # what SQLAlchemy says: the statement and its parameters
    line = database.describe_error(caught.value)
    assert "division by zero" in line and "SQL" not in line and "\n" not in line


async def test_the_ledger_records_the_labels_named_in_settings(sessions: async_sessionmaker[AsyncSession]) -> None:
    async with database.transaction(sessions) as s:
        await config_store.apply(s, [cq("a", 8, cohort=None)], actor="test")
        await store.upsert(s, [record(0, labels={"team": "vision", "cost-center": "cc-7"})])
        snap = await store.load_snapshot(s)
        await store.commit_cycle(
            s, admissions=[admit(snap.ids["team/job-0"], "a", 1)], now=NOW, ledger_labels=("cost-center",)
        )
        (interval,) = (await s.execute(select(tables.UsageInterval))).scalars().all()
    assert interval.labels == {"cost-center": "cc-7"}  # only the labels chargeback is told to keep


async def test_workload_objects_name_the_priority_class_that_gave_the_priority(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Kueue's spec.priorityClassRef: the WorkloadPriorityClass label first, else the pod template's
    PriorityClass (kept beside the pod sets), else none."""
    from admission.store import workload_objects

    pod_class = record(1)
    pod_class = store.Record(
        pod_class.job_uid, dataclasses.replace(pod_class.job, priority_class_name="batch-high"), "q", 5, NOW
    )
    both = store.Record(
        "uid-both",
        dataclasses.replace(record(2, labels={"kueue.x-k8s.io/priority-class": "urgent"}).job, priority_class_name="x"),
        "q", 9, NOW,
    )  # fmt: skip
    async with database.transaction(sessions) as s:
        await config_store.apply(s, [cq("a", 8, cohort=None)], actor="test")
        await store.upsert(s, [record(0), pod_class, both])
    async with database.transaction(sessions) as s:
        refs = {
            name: (await workload_objects.get(s, "team", name) or {}).get("spec", {}).get("priorityClassRef")
            for name in ("job-0", "job-1", "job-2")
        }
    assert refs == {
        "job-0": None,
        "job-1": {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "batch-high"},
        "job-2": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "urgent"},
    }, refs
    async with database.transaction(sessions) as s:  # the same class, restored (metrics' priority_class)
        restored = {wl.key: wl.priority_class for wl in (await store.load_snapshot(s)).workloads}
    assert restored == {"team/job-0": "", "team/job-1": "batch-high", "team/job-2": "urgent"}, restored
