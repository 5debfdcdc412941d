"""waitForPodsReady (``queues.podsready``): Kueue's configuration, deadlines, backoff and the eviction."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from queues import errors, podsready
from queues.podsets import jobs
from queues.simulation import scenario, simulator
from tests.queues.builders import CQ, flavor, make_workload
from tests.queues.builders import scheduler as make_scheduler

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_defaults_are_kueues_v1beta2_ones() -> None:
    policy = podsready.parse(None)
    assert (policy.enable, policy.timeout, policy.recovery_timeout) == (True, 1800.0, 1800.0)
    assert (policy.backoff_base_seconds, policy.backoff_max_seconds, policy.backoff_limit_count) == (60, 3600, None)
    assert [policy.backoff(n) for n in (1, 2, 3, 7, 8)] == [60, 120, 240, 3600, 3600]


def test_durations_and_recovery_default_to_the_timeout() -> None:
    policy = podsready.parse({"timeout": "1h30m", "requeuingStrategy": {"backoffLimitCount": 2}})
    assert (policy.timeout, policy.recovery_timeout, policy.backoff_limit_count) == (5400, 5400, 2)
    assert podsready.parse({"timeout": 90, "recoveryTimeout": "500ms"}).recovery_timeout == 0.5
    assert not podsready.parse({"enable": False}).enable


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"timeout": 0}, "waitForPodsReady.timeout: must be longer than 0"),
        ({"timeout": "0s"}, "waitForPodsReady.timeout: must be longer than 0"),
        ({"timeout": "soon"}, "waitForPodsReady.timeout: must be a duration such as 5m"),
        ({"blockAdmission": "yes"}, "waitForPodsReady.blockAdmission: must be true or false"),
        ({"requeuingStrategy": {"backoffLimitCount": -1}}, "waitForPodsReady.requeuingStrategy.backoffLimitCount"),
        ({"requeuingStrategy": {"timestamp": "Now"}}, "waitForPodsReady.requeuingStrategy.timestamp: must be"),
        ({"timout": "5m"}, "waitForPodsReady.timout: unknown field"),
    ],
)
def test_bad_configuration_names_the_field(raw: dict[str, Any], expected: str) -> None:
    with pytest.raises(errors.Invalid) as info:
        podsready.parse(raw)
    assert any(str(e).startswith(expected) for e in info.value.errors), info.value.errors


def test_deadline_from_the_start_or_from_the_lost_pod() -> None:
    policy = podsready.WaitForPodsReady(timeout=300, recovery_timeout=60)
    assert policy.deadline(100, False, None) == 400
    assert policy.deadline(100, False, 1000) == 1060
    assert policy.deadline(100, True, None) is None
    assert podsready.DISABLED.deadline(100, False, None) is None


def test_a_late_workload_is_evicted_requeued_with_backoff_then_deactivated() -> None:
    s = make_scheduler(flavor("a100"), CQ("a").group(("a100", {"gpu": 8})), queues={"q": "a"})
    policy = podsready.WaitForPodsReady(timeout=300, backoff_limit_count=1)
    wl = make_workload("gang").request(gpu=8).submit(s)
    s.schedule()
    assert wl.started and wl.started_at == 0.0
    s.now = 300
    evict = s.retries.pods_ready_timeout(wl.key, policy)
    assert evict is not None and (evict.reason, evict.detail) == ("PodsReadyTimeout", "Timeout")
    assert wl.admission is None and wl.requeue_at == 360 and wl.retries == 1
    assert (wl.reason, wl.message) == (
        "PodsReadyTimeout",
        "Exceeded the PodsReady timeout ns/gang; queues again after a 60s backoff (retry 1)",
    )
    assert s.schedule() == [], "it backs off"
    s.now = 360
    s.schedule()
    assert wl.admission is not None and wl.started_at == 360
    s.now = 700
    evict = s.retries.pods_ready_timeout(wl.key, policy, recovery=True)
    assert evict is not None and evict.detail == "RequeuingLimitExceeded"
    assert not wl.active and wl.reason == "Inactive"
    assert "requeued 1 times, the limit (backoffLimitCount)" in wl.message
    assert s.retries.pods_ready_timeout(wl.key, policy) is None, "a workload that is not running is not evicted"


def test_block_admission_admits_the_next_only_once_the_last_is_ready() -> None:
    """Kueue's blockAdmission: while an admitted workload's pods are not all Ready, nothing else is
    admitted, though the quota has room; the heads say whom they wait for."""
    assert podsready.parse({"blockAdmission": True}).block_admission
    assert not podsready.parse({"blockAdmission": True, "enable": False}).block_admission
    s = make_scheduler(flavor("a100"), CQ("a").group(("a100", {"gpu": 8})), queues={"q": "a"})
    s.block_admission = True
    first = make_workload("first").request(gpu=2).submit(s)
    second = make_workload("second").request(gpu=2).submit(s, now=1.0)
    s.schedule()
    assert first.admission is not None and second.admission is None
    assert second.message == "admission waits until ns/first's pods are Ready (waitForPodsReady.blockAdmission)"
    first.ready_at = 5.0  # (its pods are Ready: the caller says so)
    s.schedule()
    assert second.admission is not None


def _gangs(block: bool) -> list[tuple[int, str]]:
    """One 8-GPU node, 16 GPUs of quota: a runs (Ready at once), b is admitted but its pods wait
    for a's node until a ends at 100; c (1 GPU) comes at 10."""
    gpu = "nvidia.com/gpu"

    def job(name: str, at: int, gpus: int) -> dict[str, Any]:
        container = {"name": "c", "image": "x", "resources": {"limits": {gpu: str(gpus)}}}
        return {"at": at, "runtime": 100, "object": {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}}  # fmt: skip

    doc = {
        "name": "gangs",
        "waitForPodsReady": {"blockAdmission": block},
        "nodes": [{"name": "n1", "capacity": {gpu: "8"}}],
        "manifests": [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}},
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "cq"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": [gpu],
                            "flavors": [{"name": "f", "resources": [{"name": gpu, "nominalQuota": 16}]}],
                        }
                    ],
                },
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": "ml"},
                "spec": {"clusterQueue": "cq"},
            },
        ],
        "jobs": [job("a", 0, 8), job("b", 0, 7), job("c", 10, 1)],
    }
    result = simulator.Simulation(scenario.parse(doc)).run().to_json()
    return [(e["t"], e["workload"]) for e in result["events"] if e["type"] == "Admitted"]


def test_block_admission_in_engine_core_admits_nothing_while_a_gang_waits_for_nodes() -> None:
    assert _gangs(block=False)[:3] == [(0, "ml/a"), (0, "ml/b"), (10, "ml/c")]
    blocked = _gangs(block=True)
    assert blocked[:2] == [(0, "ml/a"), (0, "ml/b")], blocked  # (a Ready at once: b may come)
    assert blocked[2][1] == "ml/c" and blocked[2][0] >= 100, blocked  # only once b's pods run


def test_a_job_annotated_with_its_own_timeout_is_evicted_at_that_timeout() -> None:
    """KEP-4803 (``kueue.x-k8s.io/pods-ready-timeout``): engine core evicts the annotated job at its
    own timeout, the other at the policy's; the simulation's horizon covers the longest of them."""
    doc = yaml.safe_load((EXAMPLES / "pods-ready.yaml").read_text())
    doc["waitForPodsReady"] = {"timeout": "5m", "requeuingStrategy": {"backoffLimitCount": 0}}
    other = copy.deepcopy(doc["jobs"][0])
    other["object"]["metadata"]["name"] = "patient"
    other["object"]["metadata"]["annotations"] = {podsready.TIMEOUT_ANNOTATION: "2h"}
    other["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    hasty = doc["jobs"][0]["object"]["metadata"]
    hasty["annotations"] = {podsready.TIMEOUT_ANNOTATION: "90s"}
    doc["jobs"].append(other)
    parsed = scenario.parse(doc)
    assert parsed.pods_ready.horizon == 2 * (7200 + 3600)
    evicted = {e["workload"]: e["t"] for e in simulator.Simulation(parsed).run().to_json()["events"]
               if e["type"] == "Evicted"}  # fmt: skip
    assert evicted == {"team/wrong-zone": 90, "team/patient": 7200}
    policy = podsready.WaitForPodsReady(timeout=300, time_scale=0.5)
    assert policy.deadline(100, False, None, {podsready.TIMEOUT_ANNOTATION: "1m"}) == 130
    assert policy.deadline(100, False, None, {}) == 400


@pytest.mark.parametrize("value", ["soon", "0s", "-5m"])
def test_a_bad_timeout_annotation_makes_the_job_invalid_naming_it(value: str) -> None:
    job = make_workload("j").request(cpu=1).job()
    job["metadata"]["annotations"] = {podsready.TIMEOUT_ANNOTATION: value}
    with pytest.raises(errors.Invalid) as info:
        jobs.read_job(job)
    assert [e.path for e in info.value.errors] == [f"metadata.annotations[{podsready.TIMEOUT_ANNOTATION}]"]
