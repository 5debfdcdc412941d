"""Each capability's decisions in the leader's step (``admission.controller.capability``), on a clock
the test sets: no cluster, no database, no wall time. A term is an in-memory scheduler with rows;
a step is a ``StepContext`` at the instant the test names. The whole-world tests (test_provisioning,
test_pods_ready, test_topology, test_workload_objects) show the same through a simulated cluster;
these show each rule in microseconds."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry

from admission.controller.capability import STAMPS_WAIT, Capability, StepContext, Stepped
from admission.controller.features.budgets import BudgetKeeper
from admission.controller.features.checks import Checks
from admission.controller.features.placement import Placement
from admission.controller.features.podsready import PodsReady, PodsReadyWatch
from admission.controller.monitoring.workload_metrics import WorkloadMetrics
from admission.controller.objects.workload_projection import Projection
from admission.controller.term import Row, Term
from admission.controller.watch.changes import Changes
from admission.controller.watch.jobcache import JobCache
from admission.store.lease import Fence
from queues.cycle import provisioning
from queues.cycle.decisions import Evict
from queues.cycle.scheduler import Scheduler
from queues.kueue import admission_checks, codec
from queues.podsready import WaitForPodsReady
from tests.queues.builders import CQ, flavor, make_workload, scheduler

GPU = "nvidia.com/gpu"
RETRY = {"backoffLimitCount": 1, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}


def _checked_queue() -> list[Any]:
    """ClusterQueue ``cq`` (16 GPUs) whose admissions pass the ProvisioningRequest check ``capacity``."""
    cq = CQ("cq").group(("a100", {"gpu": 16}))
    cq.body["spec"]["admissionChecks"] = ["capacity"]
    config = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ProvisioningRequestConfig",
        "metadata": {"name": "capacity-config"},
        "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io", "retryStrategy": RETRY},
    }
    check = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "AdmissionCheck",
        "metadata": {"name": "capacity"},
        "spec": {
            "controllerName": admission_checks.CONTROLLER_NAME,
            "parameters": {
                "apiGroup": "kueue.x-k8s.io",
                "kind": "ProvisioningRequestConfig",
                "name": "capacity-config",
            },
        },
    }
    return [flavor("a100"), cq, codec.parse(config), codec.parse(check)]


def _term(sched: Scheduler, *names: str, now: float = 100.0) -> Term:
    """A term over ``sched`` with jobs ``names`` (4 GPUs each) submitted and scheduled at ``now``;
    job ``x``'s uid is ``uid-x``, and what the scheduler decided is committed (settled)."""
    term = Term(Fence("scheduler", "me", 1), sched)
    for i, name in enumerate(names, start=1):
        make_workload(name).request(gpu=4).submit(sched, now=now)
        term.remember(Row(i, f"uid-{name}", f"ns/{name}"))
    sched.now = now
    sched.schedule()
    for name in names:
        term.settle(f"ns/{name}")
    sched.take_told()
    return term


def _step(term: Term, now: float, *dirty: str) -> StepContext:
    term.scheduler.now = now
    return StepContext(term, now, dict.fromkeys(dirty))


def _request(job: str, attempt: int, *conditions: str, status: str = "True") -> dict[str, Any]:
    name = provisioning.request_name(job, "capacity", attempt)
    return {
        "metadata": {
            "uid": f"pr-{name}",
            "namespace": "ns",
            "name": name,
            "labels": {"turnstile.dev/job-uid": f"uid-{job}"},
        },
        "status": {"conditions": [{"type": c, "status": status, "message": f"{c.lower()} now"} for c in conditions]},
    }


def _checks(term: Term, woken: list[str], scale: float = 1.0) -> Checks:
    return Checks(
        None,  # type: ignore[arg-type]  # (no API calls: its work queue is not started)
        views={},
        current_term=lambda: term,
        run_infos=lambda term, wl: [],
        changed=woken.append,
        backoff_scale=scale,
    )


def test_a_capability_that_overrides_nothing_decides_nothing_and_wakes_nobody() -> None:
    term = _term(scheduler(flavor("a100"), CQ("cq").group(("a100", {"gpu": 8})), queues={"q": "cq"}), "a")
    step = _step(term, 200.0, "uid-a")
    nothing = Capability()
    assert nothing.decide(step) == () and nothing.next_wake() is None and nothing.commit_due() is None
    assert nothing.optional_informers() == () and nothing.loops() == ()


def test_checks_turn_a_request_s_conditions_into_the_check_s_verdict_in_the_next_step() -> None:
    term = _term(scheduler(*_checked_queue(), queues={"q": "cq"}), "train")
    wl = term.scheduler.workloads["ns/train"]
    assert wl.admission is not None and wl.checks == ("capacity",) and not wl.started
    woken: list[str] = []
    checks = _checks(term, woken)
    checks._on_request("ADDED", _request("train", 1, "Accepted"))
    assert woken == ["uid-train"], "a request's change wakes a step"
    assert checks.decide(_step(term, 110.0)) == []
    assert wl.reason == provisioning.WAITING_FOR_CAPACITY and "accepted now" in wl.message
    assert term.scheduler.take_told().checked == {"ns/train": False}

    checks._on_request("MODIFIED", _request("train", 1, "Provisioned"))
    assert checks.decide(_step(term, 120.0)) == []
    assert wl.checks == () and wl.started_at == 120.0 and wl.reason == "Admitted"
    assert term.scheduler.take_told().checked == {"ns/train": True}, "its job may start now"
    assert checks.decide(_step(term, 130.0)) == [] and not term.scheduler.take_told(), "told once"


def test_a_failed_request_is_retried_after_its_backoff_then_the_workload_is_rejected() -> None:
    term = _term(scheduler(*_checked_queue(), queues={"q": "cq"}), "train")
    wl = term.scheduler.workloads["ns/train"]
    checks = _checks(term, [], scale=0.5)
    checks._on_request("ADDED", _request("train", 1, "Failed"))
    (evict,) = checks.decide(_step(term, 200.0))
    assert isinstance(evict, Evict) and (evict.reason, evict.detail) == ("AdmissionCheck", "Retry")
    assert wl.admission is None and wl.retries == 1
    assert wl.requeue_at == 200.0 + 60 * 0.5, "backoffBaseSeconds, on the replica's time scale"

    term.scheduler.now = 231.0
    term.scheduler.schedule()  # (its backoff is over: admitted again, the second attempt's request)
    term.settle("ns/train")
    assert wl.admission is not None and wl.checks == ("capacity",)
    checks._on_request("ADDED", _request("train", 2, "Failed"))
    (rejected,) = checks.decide(_step(term, 240.0))
    assert isinstance(rejected, Evict) and rejected.detail == "Rejected"
    assert not wl.active, "past backoffLimitCount the workload is deactivated"


def test_checks_sync_the_requests_of_what_a_step_touched_or_forgot_and_all_of_them_in_a_new_term() -> None:
    term = _term(scheduler(*_checked_queue(), queues={"q": "cq"}), "train", "other")
    checks = _checks(term, [])
    checks._on_request("ADDED", _request("gone", 1))  # (a job this term no longer has)
    checks.decide(_step(term, 100.0))
    outcome = Stepped(stored=[], forgotten=["uid-gone", "uid-never"], changed=set(), touched={"ns/train"})
    checks.stepped(_step(term, 101.0), outcome)
    assert checks.queue.waiting == {"uid-gone", "uid-train"}, "its requests go; one with checks is synced"
    checks.queue.waiting.clear()
    checks.term_began(term)
    assert checks.queue.waiting == {"uid-gone", "uid-train", "uid-other"}
    assert set(checks.dirty) == {"uid-gone"}, "every request's verdict is looked at again"


def test_pods_not_ready_in_time_are_evicted_in_the_step_at_their_deadline_and_it_wakes_then() -> None:
    sched = scheduler(flavor("a100"), CQ("cq").group(("a100", {"gpu": 8})), queues={"q": "cq"})
    term = _term(sched, "late", "ready", now=1000.0)
    jobs = JobCache()
    jobs.views["uid-late"] = SimpleNamespace(ready=False, finished=False, ready_pods=None, info=None)  # type: ignore[assignment]
    jobs.views["uid-ready"] = SimpleNamespace(ready=True, finished=False, ready_pods=None, info=None)  # type: ignore[assignment]
    pods_ready = PodsReady(
        PodsReadyWatch(WaitForPodsReady(timeout=300.0, recovery_timeout=60.0)), jobs=jobs, metrics=WorkloadMetrics()
    )
    assert pods_ready.decide(_step(term, 1010.0, "uid-late", "uid-ready")) == []
    assert pods_ready.next_wake() == 1300.0, "a step is due at the deadline, from the job's start"
    assert pods_ready.commit_due() == 1010.0 + STAMPS_WAIT, "when every pod was first Ready is stored soon after"
    assert pods_ready.decide(_step(term, 1299.9)) == []
    (evict,) = pods_ready.decide(_step(term, 1300.0))
    assert isinstance(evict, Evict) and evict.workload.key == "ns/late" and evict.reason == "PodsReadyTimeout"
    assert sched.workloads["ns/ready"].admission is not None and pods_ready.next_wake() is None


def test_placement_replaces_what_was_on_a_deleted_node_and_what_waits_on_a_cordoned_one() -> None:
    sched = scheduler(flavor("a100"), CQ("cq").group(("a100", {"gpu": 16})), queues={"q": "cq"})
    term = _term(sched, "on-lost", "on-cordoned", "elsewhere")
    for key, node in (("ns/on-lost", "node-1"), ("ns/on-cordoned", "node-2"), ("ns/elsewhere", "node-3")):
        admission = sched.workloads[key].admission
        assert admission is not None
        admission.placement["main"] = {node: 1}
    changes = Changes()
    placement = Placement(None, changes, current_term=lambda: term)  # type: ignore[arg-type]  # (no informer runs)
    changes.nodes_lost["node-1"] = None
    changes.nodes_unusable["node-2"] = {"ns/on-cordoned"}
    decided = placement.decide(_step(term, 200.0))
    assert [(d.workload.key, d.reason, d.detail) for d in decided if isinstance(d, Evict)] == [
        ("ns/on-lost", "NodeFailures", "NodeDeleted"),
        ("ns/on-cordoned", "NodeFailures", "NodeUnschedulable"),
    ]
    assert sched.workloads["ns/elsewhere"].admission is not None
    assert placement.decide(_step(term, 201.0)) == [], "each node is told once"


def test_a_deleted_workload_object_requeues_its_job_and_a_deleted_job_takes_it_along() -> None:
    sched = scheduler(flavor("a100"), CQ("cq").group(("a100", {"gpu": 8})), queues={"q": "cq"})
    term = _term(sched, "kept", "deleting")
    jobs = JobCache()
    jobs.views["uid-kept"] = SimpleNamespace(ready=True, finished=False, ready_pods=None, info=None)  # type: ignore[assignment]
    projection = Projection(None, None, jobs, lambda: term)  # type: ignore[arg-type]  # (no pass runs)
    projection.deleted = {"uid-kept": None, "uid-deleting": None}  # (the job of the second is gone too)
    (evict,) = projection.decide(_step(term, 300.0))
    assert isinstance(evict, Evict) and evict.workload.key == "ns/kept" and evict.reason == "NoMatchingWorkload"
    assert sched.workloads["ns/deleting"].admission is not None
    projection.stepped(_step(term, 300.0), Stepped(["uid-new"], [], {"ns/kept"}, set()))
    assert set(projection.dirty) == {"uid-new", "uid-kept"}, "the objects of what the step stored or decided"


def test_a_spent_budget_gates_new_work_from_the_next_step_and_a_renewed_one_lets_it_go() -> None:
    sched = scheduler(flavor("a100"), CQ("cq").group(("a100", {"gpu": 8})), queues={"q": "cq"})
    term = _term(sched, "running")
    keeper = BudgetKeeper(None, current_term=lambda: term, wake=lambda: None, registry=CollectorRegistry())  # type: ignore[arg-type]
    keeper.gate = lambda wl: "budget team-a is spent until 2026-12-07T00:00:00Z"
    keeper.decide(_step(term, 400.0))
    make_workload("new").request(gpu=4).submit(sched, now=400.0)
    sched.schedule()
    new = sched.workloads["ns/new"]
    assert new.admission is None and "budget team-a is spent" in new.message
    assert sched.workloads["ns/running"].admission is not None, "what runs keeps running"
    keeper.gate = None
    keeper.decide(_step(term, 500.0))
    sched.schedule()
    assert new.admission is not None
