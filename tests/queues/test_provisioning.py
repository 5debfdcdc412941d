"""Two-phase admission with the ProvisioningRequest check in engine core: the autoscaler model's
answers (capacity there, scale-up after a delay, node limit, booking expiry), retries with Kueue's
backoff, deactivation, and what a waiting workload says."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from queues.cycle import provisioning
from queues.kueue import admission_checks, api
from queues.placement import nodes
from queues.simulation import scenario, simulator

GPU = "nvidia.com/gpu"
NODE = {"labels": {"pool": "a100"}, "capacity": {"cpu": "96", GPU: "8"}}


def _doc(
    *,
    jobs: list[tuple[float, str, int, float]],  # (at, name, pods of 8 GPUs, runtime)
    checks: list[dict[str, Any]] | None = None,
    nodes_: int = 1,
    autoscaler: dict[str, Any] | None = None,
) -> dict[str, Any]:
    checks = checks if checks is not None else [{"name": "capacity", "class": nodes.ATOMIC_SCALE_UP}]
    manifests: list[dict[str, Any]] = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "a100"},
            "spec": {"nodeLabels": {"pool": "a100"}},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "admissionChecks": [c["name"] for c in checks],
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [{"name": "a100", "resources": [{"name": GPU, "nominalQuota": "64"}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": "ns"},
            "spec": {"clusterQueue": "cq"},
        },
    ]
    for c in checks:
        manifests.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ProvisioningRequestConfig",
                "metadata": {"name": f"{c['name']}-config"},
                "spec": {
                    "provisioningClassName": c["class"],
                    "managedResources": [GPU],
                    **({"retryStrategy": c["retry"]} if "retry" in c else {}),
                },
            }
        )
        manifests.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "AdmissionCheck",
                "metadata": {"name": c["name"]},
                "spec": {
                    "controllerName": admission_checks.CONTROLLER_NAME,
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "ProvisioningRequestConfig",
                        "name": f"{c['name']}-config",
                    },
                },
            }
        )
    job_entries = []
    for at, name, pods, runtime in jobs:
        container = {"name": "c", "image": "x", "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}
        job_entries.append(
            {
                "at": at,
                "runtime": runtime,
                "object": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": name, "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
                    "spec": {
                        "parallelism": pods,
                        "completions": pods,
                        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
                    },
                },
            }
        )
    return {
        "name": "provisioning",
        "manifests": manifests,
        "nodes": [{"name": f"node-{i}", **copy.deepcopy(NODE)} for i in range(nodes_)],
        "autoscaler": autoscaler or {"provisioningDelay": 120, "maxNodes": 2, "nodeTemplate": NODE},
        "jobs": job_entries,
    }


def _run(doc: dict[str, Any], watch: str | None = None) -> tuple[dict[str, Any], list[tuple[float, str, str]]]:
    """The result, and what ``watch`` said (reason, message) at every instant it changed."""
    said: list[tuple[float, str, str]] = []
    sim = simulator.Simulation(scenario.parse(doc))

    def step(s: simulator.Simulation) -> None:
        wl = s.sched.workloads.get(f"ns/{watch}")
        if wl is not None and (not said or said[-1][1:] != s.sched.explain(wl)):
            said.append((s.now, *s.sched.explain(wl)))

    return sim.run(step if watch else None).to_json(), said


def _events(result: dict[str, Any], name: str) -> list[tuple[Any, ...]]:
    return [
        (e["t"], e["type"], e.get("detail"))
        for e in result["events"]
        if e["workload"] == f"ns/{name}" and e["type"] != "Submitted"
    ]


def test_capacity_already_there_admits_at_once() -> None:
    result, _ = _run(_doc(jobs=[(0, "fits", 1, 100)]))
    assert _events(result, "fits") == [(0, "Admitted", None), (100, "Finished", None)]


def test_scale_up_admits_after_the_delay_and_says_why_it_waits() -> None:
    # node-0 is busy with "first"; "second" needs a new node: 120 s later it starts.
    result, said = _run(_doc(jobs=[(0, "first", 1, 1000), (10, "second", 1, 100)]), watch="second")
    assert _events(result, "second") == [(130, "Admitted", None), (230, "Finished", None)]
    waiting = [s for s in said if s[0] == 10]
    assert waiting and waiting[-1][1] == provisioning.WAITING_FOR_CAPACITY
    assert "ProvisioningRequest second-capacity-1" in waiting[-1][2] and "adding 1 node(s)" in waiting[-1][2]


def test_node_limit_fails_then_retries_with_backoff_then_deactivates() -> None:
    # 4 nodes needed, only 2 may be added: every request fails at once. Kueue's defaults retry
    # 3 times after 60, 120 and 240 s; the 4th failure deactivates the workload.
    result, said = _run(_doc(jobs=[(0, "giant", 4, 100)]), watch="giant")
    assert _events(result, "giant") == [
        (0, "Evicted", "Retry"),
        (60, "Evicted", "Retry"),
        (180, "Evicted", "Retry"),
        (420, "Evicted", "Rejected"),
    ]
    final = result["workloads"]["ns/giant"]
    assert (final["state"], final["reason"]) == ("Pending", "Inactive")
    assert "more nodes than the autoscaler may add" in final["message"]
    assert said[0][1] == provisioning.WAITING_FOR_CAPACITY and "60s backoff (retry 1)" in said[0][2]


def test_retry_succeeds_once_capacity_frees() -> None:
    # "big" needs 2 free nodes; the autoscaler may add only 1 and "first" holds node-0 until 200:
    # attempts at 0 and 60 fail, the one at 180 fails too (first still runs), at 420 both nodes are free.
    result, _ = _run(
        _doc(
            jobs=[(0, "first", 1, 200), (0, "big", 2, 50)],
            autoscaler={"provisioningDelay": 120, "maxNodes": 0, "nodeTemplate": NODE},
            nodes_=2,
        )
    )
    assert _events(result, "first") == [(0, "Admitted", None), (200, "Finished", None)]
    assert _events(result, "big") == [
        (0, "Evicted", "Retry"),
        (60, "Evicted", "Retry"),
        (180, "Evicted", "Retry"),
        (420, "Admitted", None),
        (470, "Finished", None),
    ]


def test_booking_expires_while_another_check_waits_then_retry_admits() -> None:
    # Check "present" (check-capacity) finds node-0 busy at 10 and the autoscaler does not look
    # again; check "scale" is Provisioned at 130 (a node added) and books it. Nothing consumes the
    # booking, so it expires at 730: retry. At 790 "present" finds the new node free and books it,
    # so "scale" needs one more node: Provisioned at 910, when the job starts.
    doc = _doc(
        jobs=[(0, "busy", 1, 5000), (10, "late", 1, 100)],
        checks=[{"name": "present", "class": nodes.CHECK_CAPACITY}, {"name": "scale", "class": nodes.ATOMIC_SCALE_UP}],
    )
    # "busy" runs on node-0 under a queue without checks: give it its own ClusterQueue.
    doc["manifests"].append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "free"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [{"name": "a100", "resources": [{"name": GPU, "nominalQuota": "8"}]}],
                    }
                ],
            },
        }
    )
    doc["manifests"].append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "free", "namespace": "ns"},
            "spec": {"clusterQueue": "free"},
        }
    )
    doc["jobs"][0]["object"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "free"
    result, _ = _run(doc)
    assert _events(result, "late") == [(730, "Evicted", "Retry"), (910, "Admitted", None), (1010, "Finished", None)]


def test_missing_admission_check_makes_the_cluster_queue_inactive() -> None:
    doc = _doc(jobs=[(0, "j", 1, 10)])
    doc["manifests"] = [m for m in doc["manifests"] if m["kind"] != "ProvisioningRequestConfig"]
    result, _ = _run(doc)
    final = result["workloads"]["ns/j"]
    assert (final["state"], final["reason"]) == ("Pending", "Inactive")
    assert "ProvisioningRequestConfig capacity-config, which does not exist" in final["message"]


@pytest.mark.parametrize(
    ("conditions", "attempt", "started", "expected"),
    [
        ([{"type": "Provisioned", "status": "True", "message": "ok"}], 1, False, provisioning.READY),
        ([{"type": "Failed", "status": "True", "message": "no"}], 3, False, provisioning.RETRY),
        ([{"type": "Failed", "status": "True", "message": "no"}], 4, False, provisioning.REJECTED),
        (
            [{"type": "BookingExpired", "status": "True"}, {"type": "Provisioned", "status": "True"}],
            1,
            False,
            provisioning.RETRY,
        ),
        (
            [{"type": "BookingExpired", "status": "True"}, {"type": "Provisioned", "status": "True"}],
            1,
            True,
            provisioning.READY,
        ),
        ([{"type": "CapacityRevoked", "status": "True"}], 1, True, provisioning.RETRY),
        ([{"type": "Provisioned", "status": "False", "message": "adding 1 node(s)"}], 1, False, provisioning.PENDING),
    ],
)
def test_verdict_on_request_conditions(
    conditions: list[dict[str, Any]], attempt: int, started: bool, expected: str
) -> None:
    v = provisioning.verdict(conditions, attempt=attempt, strategy=api.RetryStrategy(), started=started)
    assert v.state == expected


def test_backoff_doubles_up_to_the_maximum() -> None:
    strategy = api.RetryStrategy(backoffBaseSeconds=60, backoffMaxSeconds=200)
    assert [provisioning.backoff(n, strategy) for n in (1, 2, 3, 4)] == [60, 120, 200, 200]


def test_names_are_valid_object_names() -> None:
    assert provisioning.request_name("train", "capacity", 2) == "train-capacity-2"
    long = provisioning.request_name("x" * 250, "capacity", 1)
    assert len(long) == 253 and long != provisioning.request_name("x" * 250, "capacity", 2)


def test_the_documented_autoscaling_scenario_tells_the_story_it_claims() -> None:
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "examples" / "autoscaling.yaml"
    result = simulator.Simulation(scenario.parse(yaml.safe_load(path.read_text()))).run().to_json()
    story = [
        (e["t"], e["type"], e["workload"].split("/")[1], e.get("detail"))
        for e in result["events"]
        if e["type"] != "Submitted"
    ]
    assert story == [
        (0, "Admitted", "train-1", None),  # fits the existing node
        (30, "Evicted", "giant", "Retry"),  # 4 nodes: never
        (90, "Evicted", "giant", "Retry"),
        (180, "Evicted", "sweep", "Retry"),  # 2 nodes needed, 1 may still be added
        (210, "Evicted", "giant", "Retry"),
        (240, "Evicted", "sweep", "Retry"),
        (300, "Admitted", "train-2", None),  # a node added after 150 s
        (360, "Evicted", "sweep", "Retry"),
        (400, "Finished", "train-1", None),
        (450, "Evicted", "giant", "Rejected"),  # its 4th failure: deactivated
        (520, "Finished", "train-2", None),
        (600, "Admitted", "sweep", None),  # both nodes free by its 4th attempt
        (900, "Finished", "sweep", None),
    ]
    assert result["workloads"]["vision/giant"]["reason"] == "Inactive"


def test_removing_the_check_from_the_cluster_queue_starts_the_waiting_job() -> None:
    # "second" waits for a node (120 s); at 50 the admin drops the check: it starts at once, and its pod
    # runs when the node the autoscaler is adding for it comes (130), as the simulated cluster runs it.
    doc = _doc(jobs=[(0, "first", 1, 1000), (10, "second", 1, 100)])
    cq = copy.deepcopy(next(m for m in doc["manifests"] if m["kind"] == "ClusterQueue"))
    cq["spec"]["admissionChecks"] = []
    doc["edits"] = [{"at": 50, "apply": cq}]
    result, _ = _run(doc)
    assert _events(result, "second") == [(50, "Admitted", None), (230, "Finished", None)]
    assert _events(result, "first") == [(0, "Admitted", None), (1000, "Finished", None)]  # started once


def test_a_v1beta2_strategy_applies_a_check_only_on_its_flavors() -> None:
    # onFlavors names another flavor: the reservation on a100 needs no request and starts at once,
    # even though the node limit would fail it.
    doc = _doc(jobs=[(0, "giant", 4, 100)])
    cq = next(m for m in doc["manifests"] if m["kind"] == "ClusterQueue")
    cq["spec"]["admissionChecks"] = []
    cq["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": "capacity", "onFlavors": ["h100"]}]}
    doc["waitForPodsReady"] = {"enable": False}  # (its pods never find room: it would be evicted over and over)
    result, _ = _run(doc)
    assert _events(result, "giant") == [(0, "Admitted", None)], "started at once, no request made"
    cq["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["onFlavors"] = ["a100"]
    result, _ = _run(doc)
    assert _events(result, "giant")[0] == (0, "Evicted", "Retry")
