"""An elastic job's gated pods start only up to its admission, and never while a preempted or
stopped workload's pods still hold its quota tree (``admission.controller.elastic_pods``): its
growth may be admitted into quota an eviction freed in the books a moment ago, but no GPU is ever
double-booked. The controller, the simulated cluster and PostgreSQL, without the webhook (the test
gates the template as the webhook would)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from admission.sim.operators.replicas import PODS
from tests.admission.controller.world import CONFIG, JOBS, World, eventually, job, world
from tests.admission.runner import turnstile

GATE = "kueue.x-k8s.io/elastic-job"


def _pods(w: World, prefix: str) -> list[dict[str, Any]]:
    return [p for p in w.host.server.store.list(PODS, "ml")[0] if p["metadata"]["name"].startswith(prefix)]


def _running(w: World, prefix: str) -> int:
    return sum(
        1
        for p in _pods(w, prefix)
        if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") == "Running"
    )


def _admitted(w: World, prefix: str) -> bool | None:
    """The Admitted condition of the Workload object named ``prefix...`` (None: no such object yet)."""
    workloads = next(r for r in w.host.server.served if r.plural == "workloads" and r.group == "kueue.x-k8s.io")
    objects = [o for o in w.host.server.store.list(workloads, "ml")[0] if o["metadata"]["name"].startswith(prefix)]
    conditions = {c["type"]: c["status"] for o in objects for c in (o.get("status") or {}).get("conditions") or []}
    return None if "Admitted" not in conditions else conditions["Admitted"] == "True"


def _gated(w: World, prefix: str) -> int:
    return sum(1 for p in _pods(w, prefix) if GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []])


async def test_a_growth_into_quota_an_eviction_freed_waits_for_the_evicted_pods(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:  # (team-a: 8 GPUs)
        w.host.cluster.termination_seconds = 300  # the evicted pod takes its whole grace period: 3 s
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        low = job("low", gpus=4)
        low["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 300
        await w.create(low)
        train = job("train", gpus=2)
        train["metadata"]["annotations"]["kueue.x-k8s.io/elastic-job"] = "true"
        train["spec"]["parallelism"], train["spec"]["completions"] = 2, 100
        train["spec"]["template"]["spec"]["schedulingGates"] = [{"name": GATE}]
        await w.create(train)
        await eventually(lambda: _running(w, "train-") == 2 and _running(w, "low-") == 1, what="both running")

        # up by 2 pods (4 GPUs): the 8 GPUs are taken, so they wait behind the gate
        await w.kube.patch(JOBS, "ml", "train", {"spec": {"parallelism": 4}})
        await eventually(lambda: _gated(w, "train-") == 2, what="the added pods held")

        # low stopped: its quota is free in the books at once, its pod stops for 3 s more
        env = {**os.environ, "TURNSTILE_DATABASE_URL": w.url}
        stopped = await asyncio.to_thread(turnstile, "stop", "workload", "ml/low", env=env)
        assert stopped.returncode == 0, stopped.stderr
        await eventually(
            lambda: any(p["metadata"].get("deletionTimestamp") for p in _pods(w, "low-")), what="low stopping"
        )
        seen_while_stopping = 0
        deadline = time.monotonic() + 20
        while _pods(w, "low-") and time.monotonic() < deadline:
            assert _running(w, "train-") <= 2, "a GPU double-booked: the growth started while low's pod still ran"
            assert _admitted(w, "job-train-") is not False, "its running pods go on: never said Preempting meanwhile"
            seen_while_stopping += 1
            await asyncio.sleep(0.05)
        assert not _pods(w, "low-") and seen_while_stopping > 5
        await eventually(
            lambda: _running(w, "train-") == 4, timeout=20, what="the growth's pods started once low's were gone"
        )
