"""An AppWrapper end to end on the simulated cluster: its pod sets' directives written into its
components' ``podSetInfos`` while it is suspended, then unsuspended; its component (a Job it wraps)
made by the AppWrapper controller and never queued on its own; preempted (components deleted, the
infos cleared), admitted again, billed once as one workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from admission.jobs import BY_KIND
from admission.store import database, tables
from queues.podsets import appwrappers, jobs
from tests.admission.controller.world import CONFIG, JOBS, eventually, job, world

AW = BY_KIND[(appwrappers.API_VERSION, appwrappers.KIND)]
GPU_POD = {
    "restartPolicy": "Never",
    "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
}
WRAPPED: dict[str, Any] = {
    "apiVersion": appwrappers.API_VERSION,
    "kind": appwrappers.KIND,
    "metadata": {
        "name": "wrapped",
        "namespace": "ml",
        "labels": {jobs.QUEUE_LABEL: "team-a"},
        "annotations": {"turnstile.dev/sim-runtime": "30"},
    },
    "spec": {
        "suspend": True,  # (the webhook sets it; this world has none)
        "components": [
            {
                "template": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": "inner", "labels": {jobs.QUEUE_LABEL: "team-a"}},  # (never queued itself)
                    "spec": {"parallelism": 2, "completions": 2, "template": {"spec": GPU_POD}},
                }
            }
        ],
    },
}


async def test_an_appwrapper_runs_its_component_on_its_flavor_and_gives_way(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        await w.kube.create(AW.ref, "ml", WRAPPED)

        aw = await eventually(lambda: w.started(AW.ref, "wrapped"), what="the AppWrapper admitted")
        (info,) = aw["spec"]["components"][0]["podSetInfos"]
        assert info["nodeSelector"] == {"gpu": "a100"}
        assert info["tolerations"] == [{"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}]
        assert info["annotations"]["turnstile.dev/workload"] == "ml/wrapped"

        async def pods() -> list[dict[str, Any]]:
            listed = await w.kube.request("GET", "/api/v1/namespaces/ml/pods")
            return [p for p in listed["items"] if p["metadata"]["labels"].get(appwrappers.LABEL) == "wrapped"]

        async def two() -> list[dict[str, Any]] | None:
            found = [p for p in await pods() if not p["metadata"].get("deletionTimestamp")]
            return found if len(found) == 2 else None

        made = await eventually(two, what="the wrapped Job's two pods")
        assert all(p["spec"]["nodeSelector"] == {"gpu": "a100"} for p in made)
        inner = await w.kube.get(JOBS, "ml", "inner")
        assert inner["metadata"]["ownerReferences"][0]["kind"] == appwrappers.KIND
        async with database.transaction(w.sessions) as s:
            names = (await s.execute(select(tables.Workload.name))).scalars().all()
        assert names == ["wrapped"], "the wrapped Job is the AppWrapper's, not a workload of its own"

        await w.create(job("urgent", gpus=8, priority="high"))

        async def given_way() -> bool:
            current = await w.kube.get(AW.ref, "ml", "wrapped")
            cleared = "podSetInfos" not in current["spec"]["components"][0]
            return AW.is_suspended(current) and cleared and not await pods()

        await eventually(given_way, timeout=15, what="the AppWrapper suspended, its infos cleared, its pods gone")
        await w.kube.delete(JOBS, "ml", "urgent")
        await eventually(lambda: w.started(AW.ref, "wrapped"), timeout=15, what="the AppWrapper admitted again")
        assert await w.billed("wrapped") == (appwrappers.KIND, [("nvidia.com/gpu", 2000)] * 2)
