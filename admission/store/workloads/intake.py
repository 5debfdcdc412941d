"""Jobs into workload rows: the upsert the controller's observation makes, and the pod-set codec.

A job the controller sees becomes a ``Record``; ``upsert`` writes records in chunks, idempotent by
job uid (a job seen again refreshes its row; its queue, priority and pod sets follow the job while
it waits). Pod sets are stored as JSON (``pod_sets_json``) and read back (``pod_sets_from_json``)
with everything the core needs to schedule them again after a restart.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from admission.store.queries import query
from queues import selectors
from queues.podsets import jobs
from queues.podsets.pod_resources import PodClaim
from queues.podsets.topology_requests import Request

UPSERT_CHUNK = 10_000
LEDGER_LABELS = ("team", "project")


@dataclass(frozen=True, slots=True)
class Record:
    """A job as the controller saw it, ready to become (or refresh) a workload row."""

    job_uid: str
    job: jobs.JobInfo
    local_queue: str | None
    priority: int
    created_at: dt.datetime
    # its pod sets as the core made them: with their DRA claims charged, or why they could not be
    # (``queues.dra``); None: the job's own
    pod_sets: tuple[jobs.PodSet, ...] | None = None


def pod_sets_json(pod_sets: Iterable[jobs.PodSet], priority_class_name: str | None = None) -> dict[str, Any]:
    """The stored pod sets (and, beside them, the pod template's ``priorityClassName``, which the
    Workload object's ``spec.priorityClassRef`` names when no WorkloadPriorityClass does)."""
    extra = {"priorityClassName": priority_class_name} if priority_class_name else {}
    return extra | {
        "podSets": [
            {
                "name": ps.name,
                "count": ps.count,
                "requests": {r: str(v) for r, v in ps.requests.items()},
                "nodeSelector": dict(ps.constraints.node_selector),
                "affinity": [
                    [[r.key, r.operator, list(r.values)] for r in term] for term in ps.constraints.affinity_terms
                ],
                "tolerations": [t.to_dict() for t in ps.tolerations],
                **({"minCount": ps.min_count} if ps.min_count is not None else {}),
                **({"resourceClaims": [c.to_dict() for c in ps.claims]} if ps.claims else {}),
                **({"unaccounted": ps.unaccounted} if ps.unaccounted else {}),
                **({"devices": {r: str(v) for r, v in ps.devices.items()}} if ps.devices else {}),
                **(
                    {"byFlavor": {f: {r: str(v) for r, v in c.items()} for f, c in ps.by_flavor.items()}}
                    if ps.by_flavor
                    else {}
                ),
                **({"topology": _topology_json(ps.topology)} if ps.topology is not None else {}),
                **(
                    {"containerRequests": {r: str(v) for r, v in ps.container_requests.items()}}
                    if ps.container_requests is not None
                    else {}
                ),
            }
            for ps in pod_sets
        ]
    }


def pod_sets_from_json(body: dict[str, Any]) -> tuple[jobs.PodSet, ...]:
    out = []
    for ps in body.get("podSets", []):
        constraints = selectors.NodeConstraints(
            tuple(sorted(ps.get("nodeSelector", {}).items())),
            tuple(
                tuple(selectors.Requirement(k, op, tuple(vs)) for k, op, vs in term) for term in ps.get("affinity", [])
            ),
        )
        out.append(
            jobs.PodSet(
                name=ps["name"],
                count=int(ps["count"]),
                requests={r: int(v) for r, v in ps["requests"].items()},
                constraints=constraints,
                tolerations=tuple(selectors.Toleration.from_dict(t) for t in ps.get("tolerations", [])),
                min_count=int(ps["minCount"]) if ps.get("minCount") is not None else None,
                claims=tuple(PodClaim.from_dict(c) for c in ps.get("resourceClaims", [])),
                unaccounted=ps.get("unaccounted"),
                devices={r: int(v) for r, v in (ps.get("devices") or {}).items()},
                by_flavor={f: {r: int(v) for r, v in c.items()} for f, c in (ps.get("byFlavor") or {}).items()},
                topology=_topology_from_json(ps["topology"]) if ps.get("topology") else None,
                container_requests=(
                    {r: int(v) for r, v in ps["containerRequests"].items()} if "containerRequests" in ps else None
                ),
            )
        )
    return tuple(out)


def _topology_json(request: Request) -> dict[str, Any]:
    """A pod set's topology request as stored (a term rebuilt from the store places it as the job asks)."""
    return {"mode": request.mode, "level": request.level, "sliceLevel": request.slice_level,
            "sliceSize": request.slice_size}  # fmt: skip


def _topology_from_json(body: dict[str, Any]) -> Request:
    return Request(str(body["mode"]), body.get("level"), body.get("sliceLevel"), int(body.get("sliceSize") or 1))


_UPSERT = query("intake_upsert")


async def upsert(session: AsyncSession, records: Sequence[Record]) -> dict[str, tuple[int, str]]:
    """Insert new workloads; refresh queue, priority and labels of pending ones (idempotent by job uid).

    Returns job uid -> (row id, state) for every row inserted or refreshed; a job whose row is
    admitted or finished is left as it is and absent from the answer. One statement per chunk
    over column arrays (``unnest``), so the cost is the rows, not the bind parameters.
    """
    out: dict[str, tuple[int, str]] = {}
    for start in range(0, len(records), UPSERT_CHUNK):
        chunk = records[start : start + UPSERT_CHUNK]
        rows = await session.execute(
            _UPSERT,
            {
                "job_uid": [r.job_uid for r in chunk],
                "api_version": [r.job.api_version for r in chunk],
                "kind": [r.job.kind for r in chunk],
                "namespace": [r.job.namespace for r in chunk],
                "name": [r.job.name for r in chunk],
                "local_queue": [r.local_queue for r in chunk],
                "priority": [r.priority for r in chunk],
                "pod_sets": [
                    json.dumps(
                        pod_sets_json(r.job.pod_sets if r.pod_sets is None else r.pod_sets, r.job.priority_class_name)
                    )
                    for r in chunk
                ],
                "labels": [json.dumps(dict(r.job.labels)) for r in chunk],
                "ts": [r.created_at for r in chunk],
            },
        )
        out.update((uid, (int(wid), state)) for wid, uid, state in rows)
    return out
