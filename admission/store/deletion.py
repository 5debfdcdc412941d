"""Deleting configuration objects, guarded as Kueue's finalizer ``kueue.x-k8s.io/resource-in-use``.

One rule for both paths that delete: ``turnstile delete`` (refused while the object is in use)
and the controller reconciling a Kubernetes deletion (the object's finalizer is kept until the
rule allows it). In use means:

- a ResourceFlavor named by a ClusterQueue's or a Cohort's ``resourceGroups`` (deleting it
  would quietly make those queues inactive, FlavorNotFound);
- a ClusterQueue with admitted workloads (they hold its quota until they finish);
- a LocalQueue with admitted workloads.

A ClusterQueue deleted in Kubernetes while in use is *deleting* (``mark_deleting``): it admits
nothing new (Kueue's ``Terminating``) and goes once its admitted workloads finish. Who deleted it
is what the DELETE admission review said (``request``), read back when it goes (``requester``).
"""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import config, tables

FINALIZER = "kueue.x-k8s.io/resource-in-use"
GUARDED = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "Topology")  # the kinds Kueue's finalizer keeps


async def _admitted(session: AsyncSession, *conditions: object) -> int:
    query = select(func.count()).select_from(tables.Workload).where(tables.Workload.state == "Admitted", *conditions)  # type: ignore[arg-type]
    return int((await session.execute(query)).scalar_one())


async def in_use(session: AsyncSession, kind: str, key: str) -> str | None:
    """Why ``kind/key`` may not be deleted now (a sentence naming what uses it), or None."""
    w = tables.Workload
    if kind == "ClusterQueue":
        busy = await _admitted(session, w.cluster_queue == key)
        if busy:
            return (
                f"clusterqueue/{key} still has {busy} admitted workload(s); wait for them to finish, or stop it "
                f"first (spec.stopPolicy: HoldAndDrain, or `turnstile stop clusterqueue {key} --drain` where queues "
                "live in the database), then delete it"
            )
    elif kind == "LocalQueue":
        namespace, _, name = key.partition("/")
        busy = await _admitted(session, w.namespace == namespace, w.local_queue == name)
        if busy:
            return f"localqueue/{key} still has {busy} admitted workload(s); wait for them to finish, then delete it"
    elif kind == "Topology":
        rf = tables.ResourceFlavor
        rows = (await session.execute(select(rf.name, rf.manifest).order_by(rf.name))).all()
        users = [f"resourceflavor/{name}" for name, m in rows if (m.get("spec") or {}).get("topologyName") == key]
        if users:
            return (
                f"topology/{key} is named by {', '.join(users)} (spec.topologyName); change them first, then delete it"
            )
    elif kind == "ResourceFlavor":
        users = []
        for table, owner, label in (
            (tables.ClusterQueueQuota, tables.ClusterQueueQuota.cluster_queue, "clusterqueue"),
            (tables.CohortQuota, tables.CohortQuota.cohort, "cohort"),
        ):
            names = (
                await session.execute(select(owner).where(table.flavor == key).distinct().order_by(owner))
            ).scalars()
            users += [f"{label}/{n}" for n in names]
        if users:
            return (
                f"resourceflavor/{key} is used by {', '.join(users)}; remove it from their resourceGroups first, "
                f"then delete it"
            )
    return None


async def delete_object(
    session: AsyncSession, kind: str, key: str, *, actor: str, guard: bool = True
) -> config.Outcome:
    """Delete one object, audited; refused (``config.Refused``) while it is in use. ``guard=False``
    is a scenario's edit, which deletes a flavor or LocalQueue at once (the core's semantics)."""
    await config.lock(session)
    row = await config.get_row(session, kind, key)
    if row is None:
        raise config.NotFound(f"{kind.lower()}/{key} not found")
    why = await in_use(session, kind, key) if guard else None
    if why is not None:
        raise config.Refused(why)
    before = row.manifest
    await session.delete(row)
    session.add(tables.AuditEntry(actor=actor, action="delete", kind=kind, name=key, before=before, after=None))
    await config.notify(session, f"{kind}/{key}")
    await session.flush()
    return config.Outcome(kind, key, "deleted")


async def mark_deleting(session: AsyncSession, name: str) -> bool:
    """A ClusterQueue deleted in Kubernetes but still in use admits nothing new from now on;
    True if that is news (the scheduler is told)."""
    await config.lock(session)
    row = await config.get_row(session, "ClusterQueue", name)
    if row is None or row.deleting_at is not None:
        return False
    row.deleting_at = func.now()
    await config.notify(session, f"ClusterQueue/{name}")
    await session.flush()
    return True


async def request(session: AsyncSession, kind: str, key: str, *, uid: str, actor: str) -> None:
    """Remember who asked the API server to delete ``kind/key`` (uid ``uid``): the DELETE review's user."""
    statement = insert(tables.DeletionRequest).values(kind=kind, name=key, uid=uid, actor=actor)
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=["kind", "name"], set_={"uid": uid, "actor": actor, "requested_at": func.now()}
        )
    )


async def requester(session: AsyncSession, kind: str, key: str, uid: str | None) -> str | None:
    """Who asked to delete ``kind/key``, forgotten once read; None if nobody said (or if it was
    asked of another object of that name, ``uid``)."""
    found = await session.execute(
        delete(tables.DeletionRequest)
        .where(tables.DeletionRequest.kind == kind, tables.DeletionRequest.name == key)
        .returning(tables.DeletionRequest.uid, tables.DeletionRequest.actor)
    )
    row = found.first()
    if row is None or (uid is not None and row.uid != uid):
        return None
    return str(row.actor)
