"""Admin edits of Kueue configuration: apply, quota and stop edits, history (deletion: ``deletion``).

Every edit runs inside the caller's transaction, takes the configuration lock (a transaction
advisory lock, so concurrent ``turnstile apply`` calls happen one after the other and none is
lost or interleaved), writes the object's manifest and its normalised rows (quotas per
queue, flavor and resource), appends to the audit log, and notifies listeners
(``NOTIFY turnstile_config``) when the transaction commits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, cast, delete, func, insert, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import tables
from admission.store.queries import query
from queues import errors
from queues.kueue import api, codec
from queues.model import Config

CONFIG_LOCK = 0x7475726E  # "turn": serialises configuration edits
NOTIFY_CHANNEL = "turnstile_config"

_TABLES: dict[str, type[Any]] = {
    "ResourceFlavor": tables.ResourceFlavor,
    "ClusterQueue": tables.ClusterQueue,
    "LocalQueue": tables.LocalQueue,
    "Cohort": tables.Cohort,
    "WorkloadPriorityClass": tables.WorkloadPriorityClass,
    "AdmissionCheck": tables.AdmissionCheck,
    "ProvisioningRequestConfig": tables.ProvisioningRequestConfig,
    "Topology": tables.Topology,
}


class Refused(Exception):
    """An edit that is valid but not allowed now (e.g. deleting a queue in use). Exit status 1."""


class NotFound(Exception):
    """The named object does not exist."""


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: str
    name: str
    result: str  # created | configured | unchanged | deleted


def manifest_of(obj: api.KueueObject) -> dict[str, Any]:
    """What is stored: the object in Kueue's shape, in the API version it was applied with."""
    return codec.to_manifest(obj, version=obj.version)


async def lock(session: AsyncSession) -> None:
    await session.execute(query("config_lock"), {"key": CONFIG_LOCK})


async def notify(session: AsyncSession, payload: str) -> None:
    await session.execute(query("notify"), {"channel": NOTIFY_CHANNEL, "payload": payload})


def _columns(obj: api.KueueObject) -> dict[str, Any]:
    cols: dict[str, Any] = {"name": obj.name, "manifest": manifest_of(obj)}
    if isinstance(obj, api.ClusterQueue):
        cols |= {
            "cohort": obj.spec.cohort_ref,
            "queueing_strategy": obj.spec.queueing_strategy,
            "stop_policy": obj.spec.stop_policy,
        }
    elif isinstance(obj, api.LocalQueue):
        cols |= {
            "namespace": obj.metadata.namespace,
            "cluster_queue": obj.spec.cluster_queue,
            "stop_policy": obj.spec.stop_policy,
        }
    elif isinstance(obj, api.Cohort):
        cols |= {"parent_name": obj.spec.parent_ref}
    elif isinstance(obj, api.WorkloadPriorityClass):
        cols |= {"value": obj.value}
    elif isinstance(obj, api.AdmissionCheck):
        cols |= {"controller_name": obj.spec.controller_name}
    elif isinstance(obj, api.ProvisioningRequestConfig):
        cols |= {"provisioning_class_name": obj.spec.provisioning_class_name}
    return cols


def _quota_rows(owner_field: str, owner: str, groups: Sequence[api.ResourceGroup]) -> list[dict[str, Any]]:
    rows = []
    position = 0
    for group in groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                rows.append(
                    {
                        owner_field: owner,
                        "flavor": flavor.name,
                        "resource": quota.name,
                        "position": position,
                        "nominal": quota.nominal_quota,
                        "borrowing_limit": quota.borrowing_limit,
                        "lending_limit": quota.lending_limit,
                    }
                )
                position += 1
    return rows


QUOTA_OWNERS: dict[str, tuple[type[Any], str]] = {
    "ClusterQueue": (tables.ClusterQueueQuota, "cluster_queue"),
    "Cohort": (tables.CohortQuota, "cohort"),
}
CHUNK = 1000  # keys per IN list (a statement's parameters stay well under PostgreSQL's 32,767)


async def _write_quotas(session: AsyncSession, objects: Sequence[api.KueueObject]) -> None:
    """Replace the quota rows of these ClusterQueues and Cohorts: a few statements for all of them."""
    for kind, (table, field) in QUOTA_OWNERS.items():
        owners = [obj for obj in objects if isinstance(obj, (api.ClusterQueue, api.Cohort)) and obj.kind == kind]
        for start in range(0, len(owners), CHUNK):
            names = [obj.name for obj in owners[start : start + CHUNK]]
            await session.execute(delete(table).where(getattr(table, field).in_(names)))
        rows = [row for obj in owners for row in _quota_rows(field, obj.name, obj.spec.resource_groups)]
        for start in range(0, len(rows), CHUNK):
            await session.execute(insert(table), rows[start : start + CHUNK])


async def get_row(session: AsyncSession, kind: str, key: str) -> Any:
    table = _TABLES[kind]
    pk = tuple(key.split("/", 1)) if kind == "LocalQueue" else (key,)
    return await session.get(table, pk, populate_existing=True)


async def _rows(session: AsyncSession, objects: Sequence[api.KueueObject]) -> dict[tuple[str, str], Any]:
    """(kind, key) -> stored row of each object that exists: one query per kind and chunk of keys,
    not one per object (10,000 ClusterQueues apply in seconds)."""
    out: dict[tuple[str, str], Any] = {}
    for kind, table in _TABLES.items():
        keys = sorted({obj.key for obj in objects if obj.kind == kind})
        for start in range(0, len(keys), CHUNK):
            chunk = keys[start : start + CHUNK]
            if kind == "LocalQueue":
                where = tuple_(table.namespace, table.name).in_([tuple(k.split("/", 1)) for k in chunk])
            else:
                where = table.name.in_(chunk)
            found = await session.execute(select(table).where(where).execution_options(populate_existing=True))
            for row in found.scalars():
                key = f"{row.namespace}/{row.name}" if kind == "LocalQueue" else row.name
                out[(kind, key)] = row
    return out


async def apply(
    session: AsyncSession, objects: Iterable[api.KueueObject], *, actor: str, dry_run: bool = False
) -> list[Outcome]:
    """Create or replace every object; all or nothing (the caller's transaction). Objects are read,
    written and audited in batches; one notification tells the replicas the configuration changed."""
    await lock(session)
    objects = list(objects)
    rows = await _rows(session, objects)
    outcomes: list[Outcome] = []
    changed: dict[tuple[str, str], api.KueueObject] = {}  # (the last of an object named twice)
    for obj in objects:
        row = rows.get((obj.kind, obj.key))
        after = manifest_of(obj)
        if row is None:
            result, before = "created", None
        elif row.manifest == after:
            outcomes.append(Outcome(obj.kind, obj.key, "unchanged"))
            continue
        else:
            result, before = "configured", row.manifest
        if not dry_run:
            cols = _columns(obj)
            if row is None:
                row = rows[(obj.kind, obj.key)] = _TABLES[obj.kind](**cols)
                session.add(row)
            else:
                for k, v in cols.items():
                    setattr(row, k, v)
                row.generation = row.generation + 1
                row.updated_at = func.now()
            session.add(
                tables.AuditEntry(
                    actor=actor,
                    action="create" if before is None else "update",
                    kind=obj.kind,
                    name=obj.key,
                    before=before,
                    after=after,
                )
            )
            changed[(obj.kind, obj.key)] = obj
        outcomes.append(Outcome(obj.kind, obj.key, result))
    if changed:
        await session.flush()
        await _write_quotas(session, list(changed.values()))
        kind, key = next(iter(changed))
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        await notify(session, f"{kind}/{key}{more}")
        await session.flush()
    return outcomes


async def load_object(session: AsyncSession, kind: str, key: str) -> api.KueueObject:
    row = await get_row(session, kind, key)
    if row is None:
        raise NotFound(f"{kind.lower()}/{key} not found")
    return codec.parse(row.manifest)


# Parsed objects by the md5 of their stored manifest: unchanged objects are neither decoded nor
# validated again (the scheduler reloads the configuration on every commit). Keyed by content,
# so it is right whatever database or row the manifest comes from.
_PARSED: dict[str, api.KueueObject] = {}
_PARSED_MAX = 100_000


async def list_objects(session: AsyncSession, kind: str, *, namespace: str | None = None) -> list[api.KueueObject]:
    table = _TABLES[kind]
    digest = func.md5(cast(table.manifest, Text))
    query = select(digest)
    if kind == "LocalQueue":
        if namespace is not None:
            query = query.where(table.namespace == namespace)
        query = query.order_by(table.namespace, table.name)
    else:
        query = query.order_by(table.name)
    digests = list((await session.execute(query)).scalars())
    missing = [d for d in digests if d not in _PARSED]
    if missing:
        if len(_PARSED) + len(missing) > _PARSED_MAX:
            _PARSED.clear()
        rows = await session.execute(select(digest, table.manifest).where(digest.in_(missing)))
        for d, manifest in rows:
            _PARSED[d] = codec.parse(manifest)
    return [_PARSED[d] for d in digests]


async def load_config(session: AsyncSession) -> Config:
    """The whole configuration, as the scheduling core reads it."""
    config = Config()
    for kind in _TABLES:
        for obj in await list_objects(session, kind):
            config.put(obj)
    deleting = select(tables.ClusterQueue.name).where(tables.ClusterQueue.deleting_at.is_not(None))
    config.terminating.update((await session.execute(deleting)).scalars())
    return config


async def set_quota(
    session: AsyncSession,
    cluster_queue: str,
    *,
    flavor: str,
    resource: str,
    nominal: int,
    borrowing_limit: int | None,
    lending_limit: int | None,
    actor: str,
) -> Outcome:
    """Change one (flavor, resource) quota of a ClusterQueue; the rest of its spec is kept."""
    await lock(session)
    obj = await load_object(session, "ClusterQueue", cluster_queue)
    manifest = manifest_of(obj)
    found = False
    known: list[str] = []
    for group in manifest.get("spec", {}).get("resourceGroups", []):
        for fq in group.get("flavors", []):
            for rq in fq.get("resources", []):
                known.append(f"{fq['name']}/{rq['name']}")
                if fq["name"] == flavor and rq["name"] == resource:
                    found = True
                    rq["nominalQuota"] = str(nominal // 1000) if nominal % 1000 == 0 else f"{nominal}m"
                    for key, value in (("borrowingLimit", borrowing_limit), ("lendingLimit", lending_limit)):
                        if value is not None:
                            rq[key] = str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if not found:
        raise NotFound(
            f"clusterqueue/{cluster_queue} has no quota for {resource} in flavor {flavor}; it has: "
            f"{', '.join(known) or 'no quotas'} (edit its resourceGroups with `turnstile apply -f`)"
        )
    try:
        updated = codec.parse(manifest)
    except errors.Invalid as exc:
        raise errors.Invalid(exc.errors, subject=f"clusterqueue/{cluster_queue}") from None
    (outcome,) = await apply(session, [updated], actor=actor)
    return outcome


async def set_stop_policy(session: AsyncSession, kind: str, key: str, policy: str, *, actor: str) -> Outcome:
    """``stop`` (Hold, or HoldAndDrain with --drain) and ``resume`` (None) of a queue."""
    await lock(session)
    obj = await load_object(session, kind, key)
    manifest = manifest_of(obj)
    spec = manifest.setdefault("spec", {})
    if policy == "None":
        spec.pop("stopPolicy", None)
    else:
        spec["stopPolicy"] = policy
    (outcome,) = await apply(session, [codec.parse(manifest)], actor=actor)
    return outcome


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    at: dt.datetime
    actor: str
    action: str
    kind: str
    name: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


async def history(
    session: AsyncSession,
    *,
    kind: str | None = None,
    name: str | None = None,
    since: dt.datetime | None = None,
    limit: int = 1000,
) -> list[HistoryEntry]:
    query = select(tables.AuditEntry).order_by(tables.AuditEntry.id).limit(limit)
    if kind is not None:
        query = query.where(tables.AuditEntry.kind == kind)
    if name is not None:
        query = query.where(tables.AuditEntry.name == name)
    if since is not None:
        query = query.where(tables.AuditEntry.at >= since)
    rows = (await session.execute(query)).scalars()
    return [HistoryEntry(r.at, r.actor, r.action, r.kind, r.name, r.before, r.after) for r in rows]
