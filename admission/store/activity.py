"""Stopping and resuming one workload: Kueue's ``spec.active``, asked by a person, applied by the leader.

``turnstile stop workload NS/NAME`` and ``resume workload`` (kueuectl's verbs) run on any machine,
while the leader keeps the scheduler's state in memory. So a request is a row
(``activity_requests``, one per workload: the newest wins) written with its audit entry and a
configuration NOTIFY in one transaction; the leader reads the requests when it is told (or when a
term begins), applies them to the core (``queues.cycle.retries``: ``deactivate`` evicts with reason
``Deactivated`` and parks the workload; ``activate`` queues it again) and takes the rows in the
transaction that stores their effect. A step that fails leaves the rows for the next term.

A workload is named as everywhere else: ``NAMESPACE/NAME`` with the Workload object's name
(``job-train-1a2b3``, as ``kubectl get workloads`` shows it) or its job's name.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import config, tables
from admission.store.queries import query


@dataclass(frozen=True, slots=True)
class Request:
    """One workload's ``spec.active`` as a person asked it, not yet applied."""

    workload_id: int
    job_uid: str
    active: bool
    actor: str
    requested_at: dt.datetime


_FIND = query("activity_find")


async def request(session: AsyncSession, namespace: str, name: str, *, active: bool, actor: str) -> config.Outcome:
    """Ask the leader to stop (``active=False``) or resume workload ``namespace/name``; audited
    with ``actor``. Result ``stopped``/``resumed``, or ``unchanged`` when it already is (or was
    already asked to be). ``config.NotFound`` if no such workload, ``config.Refused`` if it finished."""
    rows = (await session.execute(_FIND, {"namespace": namespace, "name": name})).all()
    if not rows:
        raise config.NotFound(
            f"workload/{namespace}/{name} not found: no workload in namespace {namespace} has that Workload "
            f"or job name (`turnstile get workloads -n {namespace}` lists them)"
        )
    row = rows[0]
    key = f"{namespace}/{row.object_name}"
    if row.state == "Finished":
        raise config.Refused(f"workload/{key} has finished; there is nothing to {'resume' if active else 'stop'}")
    live = [r for r in rows if r.state != "Finished"]
    if len(live) > 1:
        names = ", ".join(sorted(r.object_name for r in live))
        raise config.Refused(f"workload/{namespace}/{name} names {len(live)} workloads ({names}); name one of them")
    wanted = row.active if row.requested is None else row.requested
    if wanted == active:
        return config.Outcome("Workload", key, "unchanged")
    statement = insert(tables.ActivityRequest).values(workload_id=row.id, active=active, actor=actor)
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=["workload_id"], set_={"active": active, "actor": actor, "requested_at": func.now()}
        )
    )
    session.add(
        tables.AuditEntry(
            actor=actor,
            action="update",  # (of its spec.active, as kubectl patch would be)
            kind="Workload",
            name=key,
            before={"spec": {"active": bool(wanted)}},
            after={"spec": {"active": active}},
        )
    )
    await config.notify(session, f"Workload/{key}")
    await session.flush()
    return config.Outcome("Workload", key, "resumed" if active else "stopped")


_PENDING = query("activity_pending")
_TAKE = query("activity_take")


async def pending(session: AsyncSession) -> list[Request]:
    """The requests not yet applied, oldest first."""
    return [
        Request(r.workload_id, r.job_uid, bool(r.active), r.actor, r.requested_at)
        for r in await session.execute(_PENDING)
    ]


async def take(session: AsyncSession, requests: Sequence[Request]) -> None:
    """Forget requests once applied (in the transaction that stores what they did); one asked again
    meanwhile (a newer ``requested_at``) stays for the next step."""
    if requests:
        await session.execute(
            _TAKE, {"id": [r.workload_id for r in requests], "at": [r.requested_at for r in requests]}
        )
