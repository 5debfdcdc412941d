"""A stored workload row as Kueue's Workload object (``admission.store.workload_shape``): the
conditions of a finished workload, as Kueue's ``finish.Finish`` leaves them (it only adds Finished)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from admission.store.workload_shape import to_object

AT = dt.datetime(2026, 12, 7, 9, tzinfo=dt.UTC)


def _row(**changes: Any) -> dict[str, Any]:
    row = {
        "id": 1, "job_uid": "u", "api_version": "batch/v1", "kind": "Job", "namespace": "ml", "name": "train",
        "local_queue": "team", "cluster_queue": "team", "priority": 0,
        "pod_sets": {"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1000}}]},
        "state": "Finished", "reason": "JobFinished", "message": "", "created_at": AT, "admitted_at": None,
        "finished_at": AT + dt.timedelta(hours=2), "assigned_flavors": {"flavors": {"main": {"nvidia.com/gpu": "a100"}}},
        "checks": [], "labels": {}, "executed_seconds": 0, "retries": 0, "requeue_at": None, "pods_ready_at": None,
        "active": True, "object_name": "job-train-12345", "ran_since": AT + dt.timedelta(minutes=5),
    }  # fmt: skip
    return {**row, **changes}


def _conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["lastTransitionTime"]) for c in obj["status"]["conditions"]}


def test_a_workload_that_ran_to_its_end_stays_reserved_and_admitted_beside_finished() -> None:
    found = _conditions(to_object(_row()))
    assert found["QuotaReserved"] == ("True", "2026-12-07T09:05:00Z")
    assert found["Admitted"] == ("True", "2026-12-07T09:05:00Z")
    assert found["Finished"][0] == "True"


def test_a_workload_finished_after_its_eviction_is_neither_reserved_nor_admitted() -> None:
    found = _conditions(to_object(_row(assigned_flavors=None, ran_since=None)))
    assert found["QuotaReserved"][0] == "False" and "Admitted" not in found and found["Finished"][0] == "True"
