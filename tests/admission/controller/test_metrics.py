"""``/metrics`` of the leading controller: Kueue's names and labels (spec/cli.md) with values that
follow what happened (admissions, a preemption, quota in use, who waits), and GPU-seconds."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families

from admission.controller.monitoring.metrics import Metrics
from queues.kueue import codec
from tests.admission.controller.world import CONFIG, eventually, job, world

# spec/cli.md: the metric names and labels Kueue's dashboards use, and Turnstile's ledger metric.
CONTRACT = {
    "kueue_pending_workloads": {"cluster_queue", "status"},
    "kueue_admitted_workloads_total": {"cluster_queue", "priority_class"},
    "kueue_admission_wait_time_seconds": {"cluster_queue", "priority_class"},
    "kueue_evicted_workloads_total": {"cluster_queue", "reason", "underlying_cause", "priority_class"},
    "kueue_preempted_workloads_total": {"preempting_cluster_queue", "reason"},
    "kueue_admission_attempts_total": {"result"},
    "kueue_admission_attempt_duration_seconds": {"result"},
    "kueue_admitted_active_workloads": {"cluster_queue"},
    "kueue_cluster_queue_nominal_quota": {"cohort", "cluster_queue", "flavor", "resource"},
    "kueue_cluster_queue_resource_usage": {"cohort", "cluster_queue", "flavor", "resource"},
    "kueue_cluster_queue_status": {"cluster_queue", "status"},
    "kueue_reserving_active_workloads": {"cluster_queue"},
    "kueue_cluster_queue_resource_reservation": {"cohort", "cluster_queue", "flavor", "resource"},
    "kueue_cluster_queue_borrowing_limit": {"cohort", "cluster_queue", "flavor", "resource"},
    "kueue_cluster_queue_lending_limit": {"cohort", "cluster_queue", "flavor", "resource"},
    "kueue_local_queue_pending_workloads": {"name", "namespace", "status"},
    "kueue_local_queue_reserving_active_workloads": {"name", "namespace"},
    "kueue_local_queue_admitted_active_workloads": {"name", "namespace"},
    "kueue_local_queue_resource_reservation": {"name", "namespace", "flavor", "resource"},
    "kueue_local_queue_resource_usage": {"name", "namespace", "flavor", "resource"},
    "kueue_local_queue_status": {"name", "namespace", "active"},
    "kueue_cluster_queue_info": {"cluster_queue", "parent_cohort", "root_cohort"},
    "kueue_quota_reserved_workloads_total": {"cluster_queue", "priority_class"},
    "kueue_quota_reserved_wait_time_seconds": {"cluster_queue", "priority_class"},
    "kueue_local_queue_admitted_workloads_total": {"name", "namespace", "priority_class"},
    "kueue_local_queue_quota_reserved_workloads_total": {"name", "namespace", "priority_class"},
    "kueue_local_queue_evicted_workloads_total": {"name", "namespace", "reason", "underlying_cause", "priority_class"},
    "kueue_local_queue_admission_wait_time_seconds": {"name", "namespace", "priority_class"},
    "kueue_local_queue_quota_reserved_wait_time_seconds": {"name", "namespace", "priority_class"},
    "kueue_build_info": {"git_version", "git_commit", "build_date", "go_version", "compiler", "platform"},
    "kueue_evicted_workloads_once_total": {"cluster_queue", "reason", "underlying_cause", "priority_class"},
    "kueue_admission_checks_wait_time_seconds": {"cluster_queue", "priority_class"},
    "kueue_local_queue_admission_checks_wait_time_seconds": {"name", "namespace", "priority_class"},
    "kueue_cluster_queue_resource_pending": {"cluster_queue", "resource"},
    "kueue_pods_ready_to_evicted_time_seconds": {"cluster_queue", "reason", "underlying_cause"},
    "turnstile_resource_seconds_total": {"cluster_queue", "flavor", "resource", "namespace"},
}
GPU = "nvidia.com/gpu"


def scrape(metrics: Metrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = metrics.render().decode()  # the /metrics page, parsed by prometheus_client's own parser
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def value(samples: dict[str, list[tuple[dict[str, str], float]]], metric: str, /, **labels: str) -> float:
    """The sum of the samples with these labels (as PromQL's ``sum``: the per-workload families are
    split by ``priority_class`` too); at least one must be there."""
    found = [v for lbl, v in samples.get(metric, []) if labels.items() <= lbl.items()]
    assert found, (metric, labels, samples.get(metric))
    return sum(found)


async def test_metrics_have_kueues_names_and_follow_admissions_and_preemption(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)  # team-a: 8 GPUs of a100; lower priority preempted within the queue
        controller = w.start_controller("replica-1")
        for name in ("a", "b", "c"):
            await w.create(job(name, gpus=4))

        async def running(names: tuple[str, ...]) -> bool:
            jobs = [await w.get(n) for n in names]
            return all(j["spec"]["suspend"] is False for j in jobs)

        await eventually(lambda: running(("a", "b")), what="a and b to run")
        await w.create(job("urgent", gpus=4, priority="high"))
        await eventually(lambda: running(("urgent",)), what="the high-priority job to preempt and run")
        first = scrape(controller.metrics)
        for name, labels in CONTRACT.items():
            samples = first.get(name) or first.get(f"{name}_count")
            assert samples, f"{name} is missing"
            assert all(labels == set(lbl) - {"le", "replica_role"} for lbl, _ in samples), (name, samples)
        # Kueue's replica_role on every kueue_ family but build_info: this replica leads
        roles = {lbl.get("replica_role") for name, ss in first.items() if name.startswith("kueue_") for lbl, _ in ss}
        assert roles == {"leader", None} and all("replica_role" not in lbl for lbl, _ in first["kueue_build_info"])
        assert all(
            lbl.get("replica_role") == "leader"
            for name, ss in first.items()
            if name.startswith("kueue_") and name != "kueue_build_info"
            for lbl, _ in ss
        )
        team = {"cluster_queue": "team-a"}
        gpu = {"cluster_queue": "team-a", "flavor": "a100", "resource": GPU}
        assert value(first, "kueue_admitted_workloads_total", **team) == 3  # a, b, then urgent
        # split by the class each took its priority from (Kueue's priority_class): urgent's WorkloadPriorityClass
        assert value(first, "kueue_admitted_workloads_total", **team, priority_class="high") == 1
        assert value(first, "kueue_admitted_workloads_total", **team, priority_class="") == 2
        assert value(first, "kueue_evicted_workloads_total", **team, reason="Preempted") == 1
        assert value(first, "kueue_preempted_workloads_total", preempting_cluster_queue="team-a") == 1
        assert value(first, "kueue_admission_wait_time_seconds_count", **team) == 3
        assert value(first, "kueue_admitted_active_workloads", **team) == 2
        assert value(first, "kueue_cluster_queue_nominal_quota", **gpu) == 8
        assert value(first, "kueue_cluster_queue_resource_usage", **gpu) == 8
        waiting = value(first, "kueue_pending_workloads", **team, status="active") + value(
            first, "kueue_pending_workloads", **team, status="inadmissible"
        )
        assert waiting == 2  # c, and the one urgent preempted
        assert value(first, "kueue_reserving_active_workloads", **team) == 2
        assert value(first, "kueue_cluster_queue_resource_reservation", **gpu) == 8
        assert value(first, "kueue_cluster_queue_borrowing_limit", **gpu) == float("inf")  # (unset, as Kueue)
        lq = {"name": "team-a", "namespace": "ml"}
        lq_waiting = value(first, "kueue_local_queue_pending_workloads", **lq, status="active") + value(
            first, "kueue_local_queue_pending_workloads", **lq, status="inadmissible"
        )
        assert lq_waiting == 2
        assert value(first, "kueue_local_queue_admitted_workloads_total", **lq) == 3
        assert value(first, "kueue_local_queue_quota_reserved_workloads_total", **lq) == 3
        assert value(first, "kueue_local_queue_evicted_workloads_total", **lq, reason="Preempted") == 1
        assert value(first, "kueue_quota_reserved_wait_time_seconds_count", **team) == 3
        assert value(first, "kueue_local_queue_admission_wait_time_seconds_count", **lq) == 3
        assert value(first, "kueue_local_queue_reserving_active_workloads", **lq) == 2
        assert value(first, "kueue_local_queue_admitted_active_workloads", **lq) == 2
        once = {"reason": "Preempted", "underlying_cause": ""}
        assert value(first, "kueue_evicted_workloads_once_total", **team, **once) == 1
        assert value(first, "kueue_admission_checks_wait_time_seconds_count", **team) == 3  # (no checks: 0 s each)
        assert value(first, "kueue_admission_checks_wait_time_seconds_bucket", **team, le="1.0") == 3
        assert value(first, "kueue_local_queue_admission_checks_wait_time_seconds_count", **lq) == 3
        # what waits asks for before a flavor is chosen: c and the preempted one, 4 GPUs each
        assert value(first, "kueue_cluster_queue_resource_pending", **team, resource=GPU) == 8
        # the preempted job's pods had all been Ready: how long they were, until the eviction
        assert value(first, "kueue_pods_ready_to_evicted_time_seconds_count", **team, **once) == 1
        (build,) = first["kueue_build_info"]
        assert build[1] == 1 and build[0]["git_version"].startswith("v"), build
        assert value(first, "kueue_cluster_queue_status", **team, status="active") == 1
        assert value(first, "kueue_admission_attempts_total", result="success") >= 2
        assert value(first, "turnstile_database_up") == 1
        assert value(first, "turnstile_kube_responses_total", method="PATCH", code="200") >= 3  # jobs started
        refused = [dict(k[0]) for k in first.get("turnstile_kube_responses_total", []) if dict(k[0])["code"][0] == "4"]
        # nothing refused but the lists of the kinds this cluster does not serve (Kueue's CRDs)
        assert all(r == {"method": "GET", "code": "404"} for r in refused), refused
        held = value(first, "turnstile_resource_seconds_total", **gpu, namespace="ml")
        await asyncio.sleep(0.5)
        later = value(scrape(controller.metrics), "turnstile_resource_seconds_total", **gpu, namespace="ml")
        assert 0 < held < later and later - held >= 8 * 0.5 * 0.9  # 8 GPUs held for another half second


async def test_a_finished_job_is_counted_per_cluster_queue_and_local_queue(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        controller = w.start_controller("replica-1")
        began = time.monotonic()
        # (runs 0.5 s at the world's time scale: long enough for its pods to be seen Ready; a job
        # done in 10 ms can finish between two looks and is then never counted Ready)
        await w.create(job("quick", gpus=4, runtime=50))
        await w.create(job("steady", gpus=4))

        async def finished() -> dict[str, list[tuple[dict[str, str], float]]] | None:
            samples = scrape(controller.metrics)
            return samples if "kueue_finished_workloads_total" in samples else None

        samples = await eventually(finished, what="quick to finish", timeout=20)
        team, lq = {"cluster_queue": "team-a"}, {"name": "team-a", "namespace": "ml"}
        assert value(samples, "kueue_finished_workloads_total", **team) == 1  # (not steady)
        assert value(samples, "kueue_local_queue_finished_workloads_total", **lq) == 1
        assert value(samples, "kueue_admitted_workloads_total", **team) == 2
        # what its job ran, admission to completion
        assert value(samples, "kueue_execution_time_seconds_count", **team) == 1
        assert 0.01 <= value(samples, "kueue_execution_time_seconds_sum", **team) < time.monotonic() - began
        assert value(samples, "kueue_local_queue_execution_time_seconds_count", **lq) == 1
        # both jobs' pods were Ready once: from queueing, and from admission
        for name in ("ready_wait_time_seconds", "admitted_until_ready_wait_time_seconds"):
            assert value(samples, f"kueue_{name}_count", **team) == 2, name
            assert value(samples, f"kueue_local_queue_{name}_count", **lq) == 2, name

        async def object_finished() -> dict[str, list[tuple[dict[str, str], float]]] | None:
            samples = scrape(controller.metrics)
            return samples if "kueue_finished_workloads" in samples else None

        # the finished Workload object stays while its job does: Kueue's gauges of them
        samples = await eventually(object_finished, what="quick's Workload object to show it finished")
        assert value(samples, "kueue_finished_workloads", **team) == 1
        assert value(samples, "kueue_local_queue_finished_workloads", **lq) == 1
        # each job's Workload object was made once: from the job's creation (whole seconds) to it
        assert value(samples, "kueue_workload_creation_latency_seconds_count", job_kind="Job") == 2


def test_local_queue_gauges_are_counted_at_most_every_few_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """One pass over every workload costs ~50 ms at 100,000: counted once per window per scheduler."""
    from admission.controller.monitoring import local_queue_metrics as module
    from tests.queues.builders import CQ, flavor, make_workload, scheduler

    sched = scheduler(flavor("a100"), CQ("a").group(("a100", {"gpu": 8})), queues={"q": "a"})
    make_workload("one").request(gpu=1).submit(sched)
    gauges = module.LocalQueueGauges()
    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    first = gauges.families(sched)
    make_workload("two").request(gpu=1).submit(sched)
    assert gauges.families(sched) is first  # (within the window: the last count)
    now[0] += module.LOCAL_QUEUE_SECONDS
    again = gauges.families(sched)
    assert again is not first and "kueue_local_queue_pending_workloads" in "".join(again[0][3].lines)
    assert '{name="q",namespace="ns",status="active"} 2' in "".join(again[0][3].lines), again[0][3].lines


async def test_a_scrape_that_finds_the_local_queue_count_stale_is_answered_before_the_recount() -> None:
    """On the event loop, the pass over every workload runs just after the stale scrape's answer."""
    from admission.controller.monitoring import local_queue_metrics as module
    from tests.queues.builders import CQ, flavor, make_workload, scheduler

    sched = scheduler(flavor("a100"), CQ("a").group(("a100", {"gpu": 8})), queues={"q": "a"})
    make_workload("one").request(gpu=1).submit(sched)
    gauges = module.LocalQueueGauges()
    first = gauges.families(sched)  # (a term's first scrape counts at once)
    make_workload("two").request(gpu=1).submit(sched)
    assert gauges.counted is not None  # made stale (the event loop's clock is time.monotonic: not patched)
    gauges.counted = (sched, gauges.counted[1] - module.LOCAL_QUEUE_SECONDS, first)
    assert gauges.families(sched) is first and gauges.recounting  # answered with the last count
    assert gauges.families(sched) is first  # (one recount scheduled, not one per scrape)
    await asyncio.sleep(module.RECOUNT_AFTER * 2)
    again = gauges.families(sched)
    assert again is not first and not gauges.recounting
    assert '{name="q",namespace="ns",status="active"} 2' in "".join(again[0][3].lines), again[0][3].lines


def test_cohort_tree_and_local_queue_quota_families_follow_kueues_meanings() -> None:
    """Kueue's hierarchy families (``kueue_cluster_queue_info``, ``kueue_cohort_info``, the
    ``kueue_cohort_subtree_*`` gauges) and the LocalQueue quota and status gauges, from a tree:
    org > team > a, org > b (lending 1 of its 4 GPUs), and solo in no Cohort."""
    from admission.controller.monitoring.exposition import Exposition
    from admission.controller.monitoring.local_queue_metrics import LocalQueueGauges
    from admission.controller.monitoring.metrics import ResourceClock, write_queues
    from queues.kueue import api
    from tests.queues.builders import CQ, flavor, local_queue, make_workload, scheduler

    def cohort(name: str, parent: str | None = None) -> api.KueueObject:
        spec = {"parentName": parent} if parent else {}
        return codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": name},
                          "spec": spec})  # fmt: skip

    sched = scheduler(
        flavor("f"), cohort("org"), cohort("team", parent="org"),
        CQ("a").cohort("team").group(("f", {"gpu": 8})),
        CQ("b").cohort("org").group(("f", {"gpu": (4, {"lendingLimit": "1"})})),
        CQ("solo").group(("f", {"gpu": 2})),
        local_queue("ns", "nowhere", "gone"),
        queues={"qa": "a", "qb": "b", "qs": "solo", "qb2": "b"},
    )  # fmt: skip
    make_workload("a1", queue="qa").request(gpu=6).submit(sched)
    make_workload("b1", queue="qb").request(gpu=2).submit(sched)
    make_workload("b2", queue="qb2").request(gpu=1).submit(sched)  # (b's quota is two LocalQueues')
    assert len(sched.schedule()) == 3
    sched.workloads["ns/b2"].checks = ("provision",)  # (quota reserved, an admission check still to pass)
    out = Exposition()
    controller = SimpleNamespace(term=SimpleNamespace(scheduler=sched))
    write_queues(out, cast(Any, controller), ResourceClock(), LocalQueueGauges())
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(out.text()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    info = {
        lbl["cluster_queue"]: (lbl["parent_cohort"], lbl["root_cohort"])
        for lbl, _ in samples["kueue_cluster_queue_info"]
    }
    assert info == {"a": ("team", "org"), "b": ("org", "org"), "solo": ("", "")}
    tree = {lbl["cohort"]: (lbl["parent_cohort"], lbl["root_cohort"]) for lbl, _ in samples["kueue_cohort_info"]}
    assert tree == {"org": ("", "org"), "team": ("org", "org")}
    gpu = {"flavor": "f", "resource": GPU}
    # team: a's 8 GPUs; org: team's 8 and the 1 b lends (its other 3 are guaranteed to b)
    assert value(samples, "kueue_cohort_subtree_quota", cohort="team", **gpu) == 8
    assert value(samples, "kueue_cohort_subtree_quota", cohort="org", **gpu) == 9
    assert value(samples, "kueue_cohort_subtree_resource_reservations", cohort="team", **gpu) == 6
    assert value(samples, "kueue_cohort_subtree_resource_reservations", cohort="org", **gpu) == 9
    assert value(samples, "kueue_cohort_subtree_admitted_active_workloads", cohort="team") == 1
    assert value(samples, "kueue_cohort_subtree_admitted_active_workloads", cohort="org") == 2  # (not b2)
    qa = {"name": "qa", "namespace": "ns"}
    assert value(samples, "kueue_local_queue_resource_reservation", **qa, **gpu) == 6
    assert value(samples, "kueue_local_queue_resource_usage", **qa, **gpu) == 6
    assert value(samples, "kueue_local_queue_resource_reservation", name="qb", namespace="ns", **gpu) == 2
    qb2 = {"name": "qb2", "namespace": "ns"}
    assert value(samples, "kueue_local_queue_resource_reservation", **qb2, **gpu) == 1
    assert value(samples, "kueue_local_queue_resource_usage", **qb2, **gpu) == 0  # (b2 awaits its check)
    b = {"cluster_queue": "b", **gpu}
    assert value(samples, "kueue_cluster_queue_resource_reservation", **b) == 3
    assert value(samples, "kueue_cluster_queue_resource_usage", **b) == 2
    a = {"cluster_queue": "a", **gpu}
    assert value(samples, "kueue_cluster_queue_resource_usage", **a) == 6
    assert not [s for s in samples["kueue_local_queue_resource_usage"] if s[0]["name"] == "qs"]  # (holds nothing)
    assert value(samples, "kueue_local_queue_status", **qa, active="True") == 1
    assert value(samples, "kueue_local_queue_status", **qa, active="False") == 0
    assert value(samples, "kueue_local_queue_status", name="nowhere", namespace="ns", active="False") == 1


def test_pending_requests_cohort_admissions_and_admission_fair_sharing_usage_follow_kueues_meanings() -> None:
    """``kueue_cluster_queue_resource_pending`` (what waits asks for, before a flavor is chosen; 0
    for a covered resource nothing asks for), ``kueue_cohort_subtree_admitted_workloads_total`` (an
    admission counts in every Cohort above its ClusterQueue) and, with admission fair sharing,
    ``kueue_local_queue_admission_fair_sharing_usage`` (the usage the ClusterQueue orders by)."""
    from admission.controller.monitoring.exposition import Exposition
    from admission.controller.monitoring.local_queue_metrics import LocalQueueGauges
    from admission.controller.monitoring.workload_metrics import WorkloadMetrics
    from admission.controller.report import cohorts_above
    from queues.cycle.scheduler import Scheduler
    from queues.cycle.usage_history import AdmissionFairSharing
    from queues.kueue import api
    from queues.model import Config
    from tests.queues.builders import CQ, flavor, local_queue, make_workload

    def parse(kind: str, name: str, spec: dict[str, Any]) -> api.KueueObject:
        return codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": name},
                          "spec": spec})  # fmt: skip

    built = CQ("a").cohort("team").group(("f", {"gpu": 8})).build()
    scope = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    fair = built.model_copy(update={"spec": built.spec.model_copy(update={"admission_scope": scope})})
    objects = [
        flavor("f"), parse("Cohort", "org", {}), parse("Cohort", "team", {"parentName": "org"}), fair,
        CQ("solo").group(("f", {"gpu": 2})).build(),
        local_queue("ns", "qa", "a"), local_queue("ns", "qs", "solo"),
    ]  # fmt: skip
    sched = Scheduler(Config.of(objects), admission_fair_sharing=AdmissionFairSharing(half_life=60.0))
    make_workload("a1", queue="qa").request(gpu=6).submit(sched)
    make_workload("a2", queue="qa").request(gpu=5).submit(sched)  # (does not fit: it waits)
    assert len(sched.schedule()) == 1
    admitted = sched.workloads["ns/a1"]
    assert cohorts_above(sched, admitted) == ["team", "org"]
    counters = WorkloadMetrics()
    counters.admitted_workload(admitted, 1.0, cohorts_above(sched, admitted))
    families = LocalQueueGauges().families(sched)
    out = Exposition()
    counters.write(out)
    for name, kind, help_text, part in families:
        out.family(name, kind, help_text)
        out.lines.extend(part.lines)
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(out.text()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    assert value(samples, "kueue_cohort_subtree_admitted_workloads_total", cohort="team") == 1
    assert value(samples, "kueue_cohort_subtree_admitted_workloads_total", cohort="org") == 1
    assert value(samples, "kueue_cluster_queue_resource_pending", cluster_queue="a", resource=GPU) == 5
    assert value(samples, "kueue_cluster_queue_resource_pending", cluster_queue="solo", resource=GPU) == 0
    (usage,) = samples["kueue_local_queue_admission_fair_sharing_usage"]  # (qs's ClusterQueue does not order by it)
    assert usage[0] == {"name": "qa", "namespace": "ns", "cluster_queue": "a"} and usage[1] > 0, usage
