"""Engine cluster's report is rebuilt from committed events: a job that completes just as it is
evicted (the suspension arrives after its pods finished) must be reported Finished."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from admission.sim.replay import replay
from admission.store.workloads import EventRow
from queues.simulation import scenario
from queues.simulation.simulator import Recorder

AT = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
DOC: dict[str, Any] = {
    "name": "race",
    "manifests": [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "a100"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "team"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "1"}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": "ml"},
            "spec": {"clusterQueue": "team"},
        },
    ],
    "jobs": [
        {
            "at": 0,
            "runtime": 2,
            "object": {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "a", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team"}},
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
                    }
                },
            },
        }
    ],
}


def event(i: int, kind: str, **fields: Any) -> EventRow:
    base: dict[str, Any] = {
        "cluster_queue": "team",
        "flavors": None,
        "borrowing": None,
        "counts": None,
        "reason": None,
        "detail": None,
        "by": None,
    }
    return EventRow(id=i, workload="ml/a", at=AT, type=kind, **{**base, **fields})


ADMIT = {"flavors": {"main": {"nvidia.com/gpu": "a100"}}, "borrowing": False}


@pytest.mark.parametrize(
    ("finished_at", "readmitted"),
    [(2.0, False), (2.1, False), (2.0, True)],  # at the eviction's instant, just after, or after a re-admission
)
def test_a_job_that_completes_as_it_is_evicted_is_reported_finished(finished_at: float, readmitted: bool) -> None:
    sc = scenario.parse(DOC)
    timeline: list[tuple[float, int, int, Any]] = [
        (0.0, 3, 0, sc.jobs[0]),
        (0.0, 4, 1, event(1, "Admitted", **ADMIT)),
        (2.0, 4, 2, event(2, "Evicted", reason="Preempted", detail="InClusterQueue", by="ml/b")),
    ]
    if readmitted:  # evicted and admitted again in one step, as its job completed
        timeline.append((2.0, 4, 3, event(3, "Admitted", **ADMIT)))
    timeline.append((finished_at, 1, 4, event(4, "Finished", reason="JobFinished")))
    result = replay(sc, Recorder(sc), timeline, {"ml/a": ("Finished", None, None)}, cycles=0)
    (track,) = result.tracks
    assert track.state == "Finished" and track.finished == finished_at
    assert result.to_json()["workloads"]["ml/a"]["state"] == "Finished"


def test_an_admission_holds_its_pods_where_the_cluster_queue_covers_them() -> None:
    """The quota a replayed admission holds is counted as the flavor assigner counts it: its pods too
    when the ClusterQueue covers ``pods`` (``queues.workloads.usage_of``, shared with elastic resizes)."""
    doc = copy.deepcopy(DOC)
    group = doc["manifests"][1]["spec"]["resourceGroups"][0]
    group["coveredResources"].append("pods")
    group["flavors"][0]["resources"].append({"name": "pods", "nominalQuota": "10"})
    sc = scenario.parse(doc)
    flavors = {"main": {"nvidia.com/gpu": "a100", "pods": "a100"}}
    timeline: list[tuple[float, int, int, Any]] = [
        (0.0, 3, 0, sc.jobs[0]),
        (0.0, 4, 1, event(1, "Admitted", flavors=flavors, borrowing=False)),
    ]
    result = replay(sc, Recorder(sc), timeline, {"ml/a": ("Admitted", None, None)}, cycles=0)
    (track,) = result.tracks
    assert track.admission is not None
    assert track.admission.usage == {("a100", "nvidia.com/gpu"): 1000, ("a100", "pods"): 1000}
