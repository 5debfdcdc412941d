"""Elastic jobs (``queues.cycle.elastic``): an admitted job resized in place, as Kueue's workload slices.

Each test runs the scheduler as its callers do: the job's pod sets change (``Retries.job_changed``
with ``elastic``), decisions come back, and the quota tree must show exactly what is held.
"""

from __future__ import annotations

import pytest

from queues import errors
from queues.cycle.decisions import NO_MATCHING_WORKLOAD, Evict, Resize
from queues.cycle.scheduler import Scheduler
from queues.model import Workload
from queues.podsets import jobs
from queues.simulation import scenario, scenario_edits
from tests.queues.builders import CQ, GPU, WL, flavor, make_workload
from tests.queues.builders import scheduler as make_scheduler


def one_queue(gpus: int) -> Scheduler:
    return make_scheduler(flavor("a100"), CQ("a").group(("a100", {"gpu": gpus})), queues={"q": "a"})


def elastic(name: str, count: int) -> WL:
    w = make_workload(name).request(gpu=1).count(count)
    w._annotations[jobs.ELASTIC_JOB] = "true"
    return w


def scale(s: Scheduler, w: WL, wl: Workload, count: int, now: float = 1.0) -> list[object]:
    """The job's parallelism set to ``count``: what the controller's observation does with it."""
    s.now = now
    info = jobs.read_job(w.count(count).job())
    asked = s.intake.workload_for(info, seq=0, now=now)
    out: list[object] = []
    if (d := s.retries.job_changed(wl.key, asked.pod_sets, asked.shape, elastic=info.elastic)) is not None:
        out.append(d)
    return out + list(s.schedule())


def held(s: Scheduler) -> int:
    return s.snapshot.queues["a"].usage.get(("a100", GPU), 0) // 1000


def test_scaled_down_the_quota_is_freed_at_once_and_the_waiting_job_takes_it() -> None:
    s = one_queue(8)
    w = elastic("train", 6)
    wl = w.submit(s)
    waiting = make_workload("waiting").request(gpu=1).count(4).submit(s)
    s.schedule()
    assert wl.admission is not None and waiting.admission is None and held(s) == 6
    decided = scale(s, w, wl, 2)
    assert isinstance(decided[0], Resize) and decided[0].counts == {"main": 2}
    assert decided[0].released.usage == {("a100", GPU): 6000} and decided[0].admission.usage == {("a100", GPU): 2000}
    assert waiting.admission is not None, "the freed quota is taken in the same schedule call"
    assert wl.admission is not None and wl.admitted_at == 0.0, "never requeued: the same admission, resized"
    assert [ps.count for ps in wl.pod_sets] == [2] and held(s) == 6


def test_scaled_up_the_running_part_stays_and_the_growth_waits_for_quota() -> None:
    s = one_queue(8)
    w = elastic("train", 4)
    wl = w.submit(s)
    other = make_workload("other").request(gpu=1).count(3).submit(s)
    s.schedule()
    assert held(s) == 7
    assert scale(s, w, wl, 6) == [], "2 more do not fit in the 1 left: nothing is decided"
    assert wl.admission is not None and wl.admission.usage == {("a100", GPU): 4000}, "its running part goes on"
    assert wl.reason == "WaitingForQuota" and "scaling up to main: 6 waits for quota" in wl.message
    assert "1 more needed" in wl.message and "the running pods go on" in wl.message
    s.now = 5.0
    s.finish(other.key)
    (grown,) = s.schedule()
    assert isinstance(grown, Resize) and grown.counts == {"main": 6} and held(s) == 6
    assert not s.elastic.growing


def test_a_growth_stays_on_the_flavor_it_runs_on() -> None:
    s = make_scheduler(
        flavor("a100"), flavor("h100"), CQ("a").group(("a100", {"gpu": 4}), ("h100", {"gpu": 8})), queues={"q": "a"}
    )
    w = elastic("train", 4)
    wl = w.submit(s)
    s.schedule()
    assert wl.admission is not None and wl.admission.flavors == {"main": {GPU: "a100"}}
    assert scale(s, w, wl, 6) == [], "h100 has room, but a growth stays on the flavor it runs on (as Kueue's)"
    assert wl.admission.flavors == {"main": {GPU: "a100"}} and "a100" in wl.message


def test_scaled_back_before_it_grew_nothing_waits_any_more() -> None:
    s = one_queue(4)
    w = elastic("train", 4)
    wl = w.submit(s)
    s.schedule()
    assert scale(s, w, wl, 6) == [] and wl.key in s.elastic.growing
    assert scale(s, w, wl, 4) == [] and not s.elastic.growing
    assert wl.reason == "Admitted", "no longer says it waits to grow"
    (down,) = scale(s, w, wl, 3)
    assert isinstance(down, Resize) and held(s) == 3


def test_evicted_while_it_waits_to_grow_it_queues_again_and_the_growth_is_dropped() -> None:
    s = one_queue(4)
    w = elastic("train", 4)
    wl = w.submit(s)
    s.schedule()
    scale(s, w, wl, 6)
    s.retries.deactivate(wl.key)
    assert s.schedule() == [] and not s.elastic.growing and held(s) == 0


def test_a_job_without_the_annotation_is_evicted_and_queued_again_as_kueue_does() -> None:
    s = one_queue(8)
    w = make_workload("fixed").request(gpu=1).count(4)
    wl = w.submit(s)
    s.schedule()
    decided = scale(s, w, wl, 2)
    assert isinstance(decided[0], Evict) and decided[0].reason == NO_MATCHING_WORKLOAD
    assert wl.admission is not None and wl.admission.usage == {("a100", GPU): 2000}, "admitted again, as it now is"


def test_a_store_refusal_is_undone_and_tried_again() -> None:
    s = one_queue(8)
    w = elastic("train", 4)
    wl = w.submit(s)
    s.schedule()
    (down,) = scale(s, w, wl, 2)
    assert isinstance(down, Resize)
    s.elastic.undo(down)
    assert [ps.count for ps in wl.pod_sets] == [4] and held(s) == 4
    (again,) = s.schedule()
    assert isinstance(again, Resize) and again.counts == {"main": 2} and held(s) == 2


def test_the_scenario_format_scales_jobs_and_refuses_a_parallelism_of_zero() -> None:
    job = make_workload("train").request(cpu=1).count(2).job()
    ok = {"name": "x", "manifests": [], "jobs": [{"at": 0, "runtime": 10, "object": job}],
          "edits": [{"at": 1, "scale": "ns/train", "replicas": 3}]}  # fmt: skip
    (edit,) = scenario.parse(ok).edits
    assert (edit.action, edit.name, edit.replicas) == ("scale", "ns/train", 3)
    bad = {**ok, "edits": [{"at": 1, "scale": "ns/train", "replicas": 0}]}
    with pytest.raises(errors.Invalid, match=r"edits\[0\]\.replicas: a Job's parallelism must be >= 1"):
        scenario.parse(bad)


def test_a_ray_clusters_scale_names_its_worker_group() -> None:
    container = {"name": "w", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    rc = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
          "metadata": {"name": "rc", "namespace": "ns", "labels": {jobs.QUEUE_LABEL: "q"}},
          "spec": {"headGroupSpec": {"template": {"spec": {"containers": [container]}}},
                   "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "template": {"spec": {"containers": [container]}}}]}}  # fmt: skip
    doc = {"name": "x", "manifests": [], "jobs": [{"at": 0, "object": rc}]}
    (edit,) = scenario.parse({**doc, "edits": [{"at": 1, "scale": "ns/rc", "workerGroup": "gpu", "replicas": 3}]}).edits
    assert (edit.name, edit.group, edit.replicas) == ("ns/rc", "gpu", 3)
    with pytest.raises(
        errors.Invalid, match=r"edits\[0\]\.workerGroup: only a RayCluster's, RayJob's or RayService's scale"
    ):
        scenario.parse({**doc, "edits": [{"at": 1, "scale": "ns/rc", "replicas": 3}]})
    with pytest.raises(errors.Invalid, match=r"edits\[0\]\.workerGroup: no worker group 'cpu' in ns/rc"):
        scenario.parse({**doc, "edits": [{"at": 1, "scale": "ns/rc", "workerGroup": "cpu", "replicas": 3}]})
    # a RayService's: its cluster config's worker group (engine cluster writes it where its autoscaler would)
    svc = {**rc, "kind": "RayService", "spec": {"rayClusterConfig": rc["spec"]}}
    svc_doc = {"name": "x", "manifests": [], "jobs": [{"at": 0, "object": svc}]}
    (edit,) = scenario.parse(
        {**svc_doc, "edits": [{"at": 1, "scale": "ns/rc", "workerGroup": "gpu", "replicas": 2}]}
    ).edits
    groups = scenario_edits.scaled(svc, edit)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert [g["replicas"] for g in groups] == [2] and svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0][
        "replicas"
    ] == 1
