"""waitForPodsReady's deadlines in the controller (``PodsReadyWatch``), on a clock the test sets:
when a started workload is evicted if its pods are not all Ready, when one that lost a pod is, and
what a step is told. The whole-world tests (test_pods_ready.py) show the same through a cluster;
these show every rule in microseconds."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from admission.controller.features.podsready import PodsReadyWatch, scaled
from queues.model import Admission, Workload
from queues.podsets import jobs
from queues.podsready import WaitForPodsReady

POLICY = WaitForPodsReady(timeout=300.0, recovery_timeout=60.0)


def _started(key: str, at: float) -> Workload:
    wl = Workload(key, 1, "ml", "q", 0, (), created=0.0, queue_ts=0.0)
    wl.admission = Admission("cq", {}, {}, borrowing=False)
    wl.started_at = at
    return wl


def _job(*, ready: bool, finished: bool = False, ready_pods: int | None = None, info: Any = None) -> Any:
    return SimpleNamespace(ready=ready, finished=finished, ready_pods=ready_pods, info=info)  # (what it reads)


def test_an_elastic_job_is_ready_when_its_admitted_pods_are_not_when_its_gated_ones_are() -> None:
    """A scale-up's pods wait behind the elastic-job gate until the growth is admitted: the job's
    status counts 2 Ready of the 4 it asks for, and 2 is what it is admitted for."""
    watch = PodsReadyWatch(POLICY)
    wl = _started("ml/elastic", at=0.0)
    wl.pod_sets = jobs.read_job(_elastic_job(2)).pod_sets  # (admitted for 2; its Job now asks for 4)
    elastic = SimpleNamespace(elastic=True, annotations={})
    watch.observe(wl, _job(ready=False, ready_pods=2, info=elastic), now=10.0)
    assert wl.ready_at == 10.0 and watch.next_deadline() is None
    plain = _started("ml/plain", at=0.0)
    plain.pod_sets, plain.admission = wl.pod_sets, wl.admission
    watch.observe(plain, _job(ready=False, ready_pods=2, info=SimpleNamespace(elastic=False, annotations={})), now=10.0)
    assert plain.ready_at is None and watch.next_deadline() == 300.0, "any other job: all its pods, as Kueue's"
    watch.observe(wl, _job(ready=False, ready_pods=1, info=elastic), now=20.0)
    assert watch.next_deadline() == 80.0, "an admitted pod lost: the recovery timeout"


def _elastic_job(parallelism: int) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "elastic", "namespace": "ml"},
            "spec": {"parallelism": parallelism, "template": {"spec": {"containers": [container]}}}}  # fmt: skip


def test_a_started_workload_is_due_its_timeout_after_it_started_unless_its_pods_are_ready() -> None:
    watch = PodsReadyWatch(POLICY)
    late, ready = _started("ml/late", at=100.0), _started("ml/ready", at=100.0)
    watch.observe(late, _job(ready=False), now=150.0)
    watch.observe(ready, _job(ready=False), now=150.0)
    assert watch.next_deadline() == 400.0  # (from its start, not from when it was seen)
    watch.observe(ready, _job(ready=True), now=200.0)
    assert ready.ready_at == 200.0 and watch.newly_ready == {"ml/ready": 200.0}
    assert watch.due(399.9) == []
    assert watch.due(400.0) == [("ml/late", False)]
    assert watch.due(10_000.0) == [] and watch.next_deadline() is None  # (told once, then forgotten)


def test_a_ready_workload_that_loses_a_pod_is_due_the_recovery_timeout_after_it_was_seen() -> None:
    watch = PodsReadyWatch(POLICY)
    wl = _started("ml/train", at=0.0)
    watch.observe(wl, _job(ready=True), now=10.0)
    watch.observe(wl, _job(ready=False), now=500.0)  # a pod lost
    watch.observe(wl, _job(ready=False), now=520.0)  # (seen again: still from the first sight)
    assert watch.next_deadline() == 560.0
    watch.observe(wl, _job(ready=True), now=530.0)  # back in time: no deadline
    assert watch.due(10_000.0) == []
    watch.observe(wl, _job(ready=False), now=600.0)
    assert watch.due(660.0) == [("ml/train", True)]


def test_what_is_not_started_finished_or_disabled_has_no_deadline_and_due_is_oldest_first() -> None:
    watch = PodsReadyWatch(POLICY)
    waiting = _started("ml/checks", at=0.0)
    waiting.checks = ("capacity",)  # quota held, its admission check not passed: not started
    watch.observe(waiting, _job(ready=False), now=0.0)
    watch.observe(_started("ml/done", at=0.0), _job(ready=False, finished=True), now=0.0)
    watch.observe(_started("ml/gone", at=0.0), None, now=0.0)
    assert watch.deadlines == {}
    off = PodsReadyWatch(WaitForPodsReady(enable=False))
    off.observe(_started("ml/x", at=0.0), _job(ready=False), now=0.0)
    assert off.deadlines == {}
    for key, at in (("ml/b", 20.0), ("ml/a", 10.0), ("ml/c", 30.0)):
        watch.observe(_started(key, at=at), _job(ready=False), now=at)
    assert [key for key, _ in watch.due(1_000.0)] == ["ml/a", "ml/b", "ml/c"]


def test_scaled_durations_follow_the_time_scale() -> None:
    policy = scaled(POLICY, 0.01)
    assert (policy.timeout, policy.recovery_timeout) == (3.0, 0.6)
    assert scaled(POLICY, 1.0) is POLICY


def test_a_deadline_that_moved_or_went_is_not_told_at_its_old_time() -> None:
    watch = PodsReadyWatch(POLICY)
    wl = _started("ml/moved", at=0.0)
    watch.observe(wl, _job(ready=False), now=0.0)  # due at 300
    watch.observe(wl, _job(ready=True), now=100.0)  # Ready: no deadline
    watch.observe(wl, _job(ready=False), now=400.0)  # lost a pod: due at 460
    assert watch.next_deadline() == 460.0
    assert watch.due(300.0) == []
    assert watch.due(460.0) == [("ml/moved", True)] and watch.due(10_000.0) == []
    gone = _started("ml/gone", at=0.0)
    watch.observe(gone, _job(ready=False), now=0.0)
    watch.forget(gone.key)
    assert watch.next_deadline() is None and watch.due(10_000.0) == []


def test_a_job_with_its_own_timeout_is_due_that_timeout_scaled_as_the_policys() -> None:
    """KEP-4803's ``kueue.x-k8s.io/pods-ready-timeout``: the job's own timeout, not the policy's; in
    engine cluster it is scaled by the time scale as the policy's durations are."""
    own = SimpleNamespace(elastic=False, annotations={"kueue.x-k8s.io/pods-ready-timeout": "2m"})
    watch = PodsReadyWatch(POLICY)
    watch.observe(_started("ml/own", at=100.0), _job(ready=False, info=own), now=110.0)
    assert watch.next_deadline() == 220.0
    fast = PodsReadyWatch(scaled(POLICY, 0.01))
    fast.observe(_started("ml/own", at=1.0), _job(ready=False, info=own), now=1.1)
    assert fast.next_deadline() == 1.0 + 1.2
    fast.observe(_started("ml/plain", at=1.0), _job(ready=False, info=SimpleNamespace(annotations={})), now=1.1)
    assert fast.deadlines["ml/plain"] == (1.0 + 3.0, False), "the policy's timeout for the others"
