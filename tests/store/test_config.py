"""Admin edits in PostgreSQL: apply, audit, delete refusal, concurrency."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.store import config as config_store
from admission.store import database, deletion, tables
from queues.kueue import api, codec


def cq(name: str, gpus: str = "8", **spec: Any) -> api.KueueObject:
    return codec.parse(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}],
                    }
                ],
                **spec,
            },
        }
    )


async def apply(
    sessions: async_sessionmaker[AsyncSession], *objs: api.KueueObject, actor: str = "alice", dry_run: bool = False
) -> list[str]:
    async with database.transaction(sessions) as s:
        return [o.result for o in await config_store.apply(s, objs, actor=actor, dry_run=dry_run)]


async def test_apply_creates_configures_and_leaves_unchanged(sessions: async_sessionmaker[AsyncSession]) -> None:
    assert await apply(sessions, cq("team-a")) == ["created"]
    assert await apply(sessions, cq("team-a")) == ["unchanged"]
    assert await apply(sessions, cq("team-a", "16")) == ["configured"]
    async with database.transaction(sessions) as s:
        quota = await s.get(tables.ClusterQueueQuota, ("team-a", "a100", "nvidia.com/gpu"))
        assert quota is not None and quota.nominal == 16000
        row = await config_store.get_row(s, "ClusterQueue", "team-a")
        assert row.generation == 2
        entries = await config_store.history(s, kind="ClusterQueue", name="team-a")
    assert [e.action for e in entries] == ["create", "update"]
    assert entries[1].before is not None and entries[1].after is not None
    assert entries[1].after["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "16"


async def test_dry_run_writes_nothing(sessions: async_sessionmaker[AsyncSession]) -> None:
    assert await apply(sessions, cq("team-a"), dry_run=True) == ["created"]
    async with database.transaction(sessions) as s:
        assert await config_store.get_row(s, "ClusterQueue", "team-a") is None
        assert (await s.execute(select(func.count()).select_from(tables.AuditEntry))).scalar_one() == 0


async def test_a_failing_batch_changes_nothing(sessions: async_sessionmaker[AsyncSession]) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with database.transaction(sessions) as s:
            await config_store.apply(s, [cq("a"), cq("b")], actor="alice")
            raise Boom
    async with database.transaction(sessions) as s:
        assert await config_store.list_objects(s, "ClusterQueue") == []


async def test_round_trip_through_the_store(sessions: async_sessionmaker[AsyncSession]) -> None:
    obj = cq("team-a", cohort="training", preemption={"withinClusterQueue": "LowerPriority"})
    await apply(sessions, obj)
    async with database.transaction(sessions) as s:
        assert await config_store.load_object(s, "ClusterQueue", "team-a") == obj
        config = await config_store.load_config(s)
    assert config.cluster_queues["team-a"] == obj


async def test_deleting_a_cluster_queue_in_use_is_refused(sessions: async_sessionmaker[AsyncSession]) -> None:
    await apply(sessions, cq("team-a"))
    async with database.transaction(sessions) as s:
        s.add(
            tables.Workload(
                job_uid="u1",
                api_version="batch/v1",
                kind="Job",
                namespace="ns",
                name="j",
                cluster_queue="team-a",
                pod_sets={},
                state="Admitted",
                queue_ts=dt.datetime.now(dt.UTC),
                admitted_at=dt.datetime.now(dt.UTC),
            )
        )
    with pytest.raises(config_store.Refused, match="still has 1 admitted workload"):
        async with database.transaction(sessions) as s:
            await deletion.delete_object(s, "ClusterQueue", "team-a", actor="alice")
    async with database.transaction(sessions) as s:
        await s.execute(tables.Workload.__table__.update().values(state="Finished", admitted_at=None))
    async with database.transaction(sessions) as s:
        await deletion.delete_object(s, "ClusterQueue", "team-a", actor="alice")
        assert await s.get(tables.ClusterQueueQuota, ("team-a", "a100", "nvidia.com/gpu")) is None
        assert [e.action for e in await config_store.history(s)] == ["create", "delete"]


async def test_a_flavor_named_by_a_queue_is_in_use(sessions: async_sessionmaker[AsyncSession]) -> None:
    flavor = codec.parse(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a100"}}
    )
    await apply(sessions, flavor, cq("team-a"), cq("team-b"))
    with pytest.raises(config_store.Refused, match="used by clusterqueue/team-a, clusterqueue/team-b"):
        async with database.transaction(sessions) as s:
            await deletion.delete_object(s, "ResourceFlavor", "a100", actor="alice")
    async with database.transaction(sessions) as s:  # nothing was deleted
        assert (await config_store.load_config(s)).flavors.keys() == {"a100"}
        await deletion.delete_object(s, "ClusterQueue", "team-a", actor="alice")
        await deletion.delete_object(s, "ClusterQueue", "team-b", actor="alice")
        await deletion.delete_object(s, "ResourceFlavor", "a100", actor="alice")  # unused now
        assert [e.action for e in await config_store.history(s, kind="ResourceFlavor")] == ["create", "delete"]


async def test_a_cluster_queue_marked_deleting_terminates(sessions: async_sessionmaker[AsyncSession]) -> None:
    await apply(sessions, cq("team-a"))
    async with database.transaction(sessions) as s:
        assert await deletion.mark_deleting(s, "team-a") is True
        assert await deletion.mark_deleting(s, "team-a") is False  # said once
    async with database.transaction(sessions) as s:
        config = await config_store.load_config(s)
    assert config.terminating == {"team-a"} and "team-a" in config.cluster_queues


async def test_quota_set_keeps_the_rest_and_validates(sessions: async_sessionmaker[AsyncSession]) -> None:
    await apply(sessions, cq("team-a", cohort="training"))
    async with database.transaction(sessions) as s:
        await config_store.set_quota(
            s,
            "team-a",
            flavor="a100",
            resource="nvidia.com/gpu",
            nominal=24000,
            borrowing_limit=4000,
            lending_limit=None,
            actor="bob",
        )
    async with database.transaction(sessions) as s:
        obj = await config_store.load_object(s, "ClusterQueue", "team-a")
    assert isinstance(obj, api.ClusterQueue)
    quota = obj.spec.resource_groups[0].flavors[0].resources[0]
    assert (quota.nominal_quota, quota.borrowing_limit, obj.spec.cohort_ref) == (24000, 4000, "training")
    with pytest.raises(config_store.NotFound, match=r"has no quota for nvidia\.com/gpu in flavor h100; it has: a100"):
        async with database.transaction(sessions) as s:
            await config_store.set_quota(
                s,
                "team-a",
                flavor="h100",
                resource="nvidia.com/gpu",
                nominal=1000,
                borrowing_limit=None,
                lending_limit=None,
                actor="bob",
            )


async def test_concurrent_applies_of_one_object_both_land_in_order(engine: Any) -> None:
    factory = database.sessions(engine)
    await apply(factory, cq("team-a", "1"))

    async def edit(gpus: str, actor: str) -> None:
        async with database.transaction(factory) as s:
            await config_store.apply(s, [cq("team-a", gpus)], actor=actor)
            await asyncio.sleep(0.05)  # hold the lock: the other must wait, not interleave

    await asyncio.gather(*(edit(str(n), f"admin-{n}") for n in range(2, 8)))
    async with database.transaction(factory) as s:
        entries = await config_store.history(s, kind="ClusterQueue", name="team-a")
        final = await config_store.load_object(s, "ClusterQueue", "team-a")
    updates = entries[1:]
    assert len(updates) == 6
    # Each edit saw the previous one's result: the chain of before -> after is unbroken.
    for prev, nxt in itertools.pairwise(updates):
        assert nxt.before == prev.after
    assert final == codec.parse(updates[-1].after or {})


async def test_listeners_hear_of_committed_changes_only(
    migrated_url: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    from admission.store import notify

    async with notify.listen(migrated_url) as heard:
        with pytest.raises(RuntimeError):
            async with database.transaction(sessions) as s:
                await config_store.apply(s, [cq("rolled-back")], actor="alice")
                raise RuntimeError("abort")
        await apply(sessions, cq("team-a"))
        await apply(sessions, cq("team-a"))  # unchanged: nothing to hear
        assert await asyncio.wait_for(heard.get(), timeout=5) == (config_store.NOTIFY_CHANNEL, "ClusterQueue/team-a")
        await asyncio.sleep(0.2)
        assert heard.pending() == []
