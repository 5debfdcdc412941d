"""Kueue's Workload objects (``workloads.kueue.x-k8s.io``), kept by the leader from PostgreSQL.

One object per queued job, named as Kueue names it and owned by the job, its status following
the workload (pending with its reason, then quota reserved and admitted with its flavors, then
finished); made again when deleted (a job that held quota is queued again, as Kueue does) or lost
while no replica led; gone with its job.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from admission.controller.objects.workload_projection import WORKLOADS, Projection
from admission.kube.client import EVENTS, KubeError
from tests.admission.controller.test_restart import running
from tests.admission.controller.world import CONFIG, JOBS, World, eventually, job, world


async def _objects(w: World) -> dict[str, dict[str, Any]]:
    listed = await w.kube.request("GET", WORKLOADS.path("ml"))
    return {o["metadata"]["name"]: o for o in listed.get("items") or []}


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


async def _one(w: World, prefix: str, check: Any = None) -> dict[str, Any] | None:
    for name, obj in (await _objects(w)).items():
        if name.startswith(prefix) and (check is None or check(obj)):
            return obj
    return None


async def test_a_queued_job_has_a_kueue_workload_object_that_follows_it_and_goes_with_it(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        controller = w.start_controller("replica-1")
        projection = next(c for c in controller.capabilities if isinstance(c, Projection))
        first = await w.create(job("train", gpus=8, runtime=2000))  # (20 s at the time scale: it outlives the test)
        await w.create(job("waits", gpus=8, runtime=200))
        obj = await eventually(
            lambda: _one(w, "job-train-", lambda o: (_condition(o, "Admitted") or {}).get("status") == "True"),
            what="train's Workload admitted",
        )
        admitted_at = time.monotonic()
        assert obj["metadata"]["name"] == f"job-train-{first['metadata']['uid'][:5]}"
        owner = obj["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "Job", "train", first["metadata"]["uid"], True
        )  # fmt: skip
        assert obj["spec"]["queueName"] == "team-a" and obj["spec"]["active"] is True
        assert obj["spec"]["podSets"][0]["count"] == 1
        admission = obj["status"]["admission"]
        assert admission["clusterQueue"] == "team-a"
        assert admission["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": "a100"}
        assert admission["podSetAssignments"][0]["resourceUsage"] == {"nvidia.com/gpu": "8"}
        # what the projection wrote is kept only until the watch brings it back (a copy of every
        # object would be most of its memory): then the informer's copy is all it keeps
        await eventually(lambda: first["metadata"]["uid"] not in projection.written, what="the write's echo")
        assert projection.objects[first["metadata"]["uid"]].name == obj["metadata"]["name"]

        # Kueue's Events on the object itself, as kubectl describe workload finds them (by uid)
        assert await eventually(
            lambda: _events_on(w, obj, {"QuotaReserved", "Admitted"}), what="QuotaReserved and Admitted Events"
        ) == {
            ("QuotaReserved", "Quota reserved in ClusterQueue team-a"),
            ("Admitted", "Admitted by ClusterQueue team-a"),
        }

        waiting = await eventually(lambda: _one(w, "job-waits-"), what="waits' Workload")
        pending = await eventually(lambda: _events_on(w, waiting, {"Pending"}), what="a Pending Event on waits")
        assert all("nvidia.com/gpu" in message for _, message in pending), pending
        reserved = _condition(waiting, "QuotaReserved")
        assert reserved is not None and reserved["status"] == "False" and "admission" not in waiting["status"]

        # Deleted by someone while its job waits: made again (a new object) at the next pass.
        name, uid = waiting["metadata"]["name"], waiting["metadata"]["uid"]
        await w.kube.delete(WORKLOADS, "ml", name)
        again = await eventually(
            lambda: _one(w, name, lambda o: o["metadata"]["uid"] != uid), what="waits' Workload made again"
        )
        assert again["spec"]["queueName"] == "team-a"

        # Deleted while its job runs: as Kueue, the job is stopped and queued again under a new
        # Workload (NoMatchingWorkload); waits, queued earlier, takes the quota.
        train = await _one(w, "job-train-")
        assert train is not None and "accumulatedPastExecutionTimeSeconds" not in train["status"]
        await asyncio.sleep(max(0.0, 1.2 - (time.monotonic() - admitted_at)))  # (it has run a second)
        await w.kube.delete(WORKLOADS, "ml", train["metadata"]["name"])
        await eventually(lambda: running(w, "waits"), timeout=20, what="waits to run in train's quota")
        assert (await w.get("train"))["spec"]["suspend"] is True

        def requeued(o: dict[str, Any]) -> bool:
            evicted = _condition(o, "Evicted") or {}
            new = o["metadata"]["uid"] != train["metadata"]["uid"]
            return new and (evicted.get("status"), evicted.get("reason")) == ("True", "NoMatchingWorkload")

        again = await eventually(lambda: _one(w, "job-train-", requeued), what="train's new Workload, evicted")
        # what it ran before, as Kueue's accumulatedPastExecutionTimeSeconds (whole seconds)
        assert again["status"]["accumulatedPastExecutionTimeSeconds"] >= 1, again["status"]

        # waits finishes: Finished; train is admitted again.
        done = await eventually(
            lambda: _one(w, "job-waits-", lambda o: (_condition(o, "Finished") or {}).get("status") == "True"),
            timeout=20,
            what="waits' Workload finished",
        )
        assert done["status"]["admission"]["clusterQueue"] == "team-a"  # (what it ran with, kept as Kueue's)
        # as Kueue's: Finished is added; QuotaReserved and Admitted stay as they were when it ran
        # (`kubectl get workloads` shows ADMITTED True, FINISHED True), since its admission
        ran = [_condition(done, c) or {} for c in ("QuotaReserved", "Admitted")]
        assert [c.get("status") for c in ran] == ["True", "True"], ran
        assert ran[0]["lastTransitionTime"] <= _condition(done, "Finished")["lastTransitionTime"]
        await eventually(lambda: running(w, "train"), timeout=20, what="train to run again")

        # The job deleted: its Workload goes with it.
        await w.kube.delete(JOBS, "ml", "waits")
        await eventually(lambda: _gone(w, "job-waits-"), what="waits' Workload deleted with its job")


async def _events_on(w: World, obj: dict[str, Any], reasons: set[str]) -> set[tuple[str, str]] | None:
    meta = obj["metadata"]
    selector = f"involvedObject.kind=Workload,involvedObject.name={meta['name']},involvedObject.uid={meta['uid']}"
    listed = await w.kube.request("GET", EVENTS.path("ml"), query={"fieldSelector": selector})
    found = {(e["reason"], e["message"]) for e in listed.get("items") or [] if e["reason"] in reasons}
    return found if {r for r, _ in found} == reasons else None


async def _gone(w: World, prefix: str) -> bool:
    return await _one(w, prefix) is None


async def test_objects_lost_while_no_controller_ran_are_made_again_by_the_next_leader(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        first = w.start_controller("replica-1")
        await w.create(job("a", gpus=4))
        await w.create(job("b", gpus=4))
        await eventually(lambda: _count(w, 2), what="two Workload objects")
        await w.stop_controller(first)
        for name in list(await _objects(w)):
            await w.kube.delete(WORKLOADS, "ml", name)
        try:
            await w.kube.create(
                WORKLOADS,
                "ml",
                {"metadata": {"name": "job-stale-00000", "labels": {"kueue.x-k8s.io/job-uid": "no-such-job"}},
                 "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]}},
            )  # fmt: skip
        except KubeError as exc:  # (the webhook may refuse objects it did not make)
            assert exc.status == 403, exc
        w.start_controller("replica-2")
        await eventually(lambda: _names(w, {"job-a-", "job-b-"}), what="both made again, nothing else")


async def _count(w: World, n: int) -> bool:
    return len(await _objects(w)) == n


async def _names(w: World, prefixes: set[str]) -> bool:
    names = list(await _objects(w))
    return len(names) == len(prefixes) and all(any(n.startswith(p) for n in names) for p in prefixes)
