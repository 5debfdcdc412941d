"""The ledger's started and used GPU-hours end to end: the simulated dcgm-exporter scraped by a
real Prometheus, read by the controller with no reclaim policy at all (metering needs only
``TURNSTILE_PROMETHEUS_URL``), written to the ledger, and reported by ``turnstile usage``."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import aiohttp
from sqlalchemy import select

from admission.controller.features.utilisation import MAX_POINTS, RunWindow, batches
from admission.kube.client import ResourceRef
from admission.policy import Policy
from admission.sim.operators import autoscaler as sim_autoscaler
from admission.sim.operators import dcgm
from admission.store import database, tables
from tests.admission.controller.world import World, eventually, job, world
from tests.admission.runner import turnstile
from tests.prometheus import needs_prometheus, running

pytestmark = needs_prometheus

NODES = ResourceRef("v1", "Node", "nodes", namespaced=False)
NODE = {"labels": {"gpu": "a100"}, "capacity": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}}
CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {gpu: a100}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: "8"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
"""


def gpu_job(name: str, team: str, utilization: float | None) -> dict[str, Any]:
    obj = job(name, gpus=4)
    obj["metadata"].setdefault("labels", {})["team"] = team
    if utilization is not None:
        obj["metadata"]["annotations"][dcgm.ANNOTATION] = str(utilization)
    return obj


async def _ledger(w: World, name: str) -> Any:
    async with database.transaction(w.sessions) as s:
        rows = (
            await s.execute(select(tables.UsageInterval).where(tables.UsageInterval.workload == f"ml/{name}"))
        ).scalars()
        return next(iter(rows.all()), None)


async def test_used_hours_follow_the_measured_utilisation_and_unknown_stays_unknown(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", NODE))
        await w.apply(CONFIG)
        target = urlparse(w.host.url).netloc
        async with running(tmp_path / "prometheus", target, dcgm.PATH, honor_labels=False) as prometheus:
            w.start_controller("replica-1", policy=Policy(prometheus_url=prometheus, reclaim_interval=0.5))
            await w.create(gpu_job("train", "vision", 0.6))
            await w.create(gpu_job("blind", "nlp", None))  # its pods have no series

            async def measured() -> Any:
                row = await _ledger(w, "train")
                return row if row is not None and row.measured_seconds >= 3 else None

            train = await eventually(measured, timeout=30, what="three seconds of train measured")
            assert train.running_at is not None and train.running_at >= train.started_at
            assert abs(train.busy_seconds / train.measured_seconds - 0.6) < 0.02, (
                train.busy_seconds,
                train.measured_seconds,
            )
            # (measured no longer than it ran: each read counts only the part of its span the job ran)
            elapsed = (dt.datetime.now(dt.UTC) - train.running_at).total_seconds()
            assert train.measured_seconds <= elapsed + 0.5, (train.measured_seconds, elapsed)
            blind = await _ledger(w, "blind")
            assert blind.running_at is not None and blind.measured_seconds == 0 and blind.busy_seconds == 0

            env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url, "TURNSTILE_HOME": str(tmp_path / "home")}
            done = await asyncio.to_thread(
                turnstile, "usage", "--by", "label:team", "--since", "1h", "-o", "json", env=env
            )
            assert done.returncode == 0, done.stderr
            rows = {r["group"]: r for r in json.loads(done.stdout)["rows"]}
            assert abs(rows["vision"]["efficiency"] - 0.6) < 0.02
            assert 0 < rows["vision"]["usedHours"] < rows["vision"]["startedHours"] <= rows["vision"]["requestedHours"]
            assert rows["nlp"]["usedHours"] is None and rows["nlp"]["efficiency"] is None
            assert rows["nlp"]["startedHours"] > 0


def test_ended_runs_are_batched_by_length_into_few_queries() -> None:
    """Ten thousand runs ending in a minute: runs of a like length share a query; a query's window
    never needs more than MAX_POINTS steps."""
    pod = frozenset({("ml", "p")})
    short = [RunWindow(i, pod, 1000.0 + i * 0.006, 1020.0 + i * 0.006) for i in range(5000)]  # 20 s runs
    long = [RunWindow(5000 + i, pod, 1060.0 - 86400 * 2 + i, 1060.0 + i * 0.006) for i in range(5000)]  # 2 days
    found = batches(short + long)
    assert [(step, len(runs)) for step, runs in found] == [(1.0, 5000), (4096.0, 5000)]
    assert RunWindow(0, pod, 0, 20).step == 1.0 and RunWindow(0, pod, 0, 3600).step == 64.0
    week_apart = [RunWindow(i, pod, i * 86400 * 7.0, i * 86400 * 7.0 + 20) for i in range(3)]  # 1 s steps, weeks apart
    assert [len(runs) for _, runs in batches(week_apart)] == [1, 1, 1]
    for step, runs in found:
        assert (max(r.until for r in runs) - min(r.since for r in runs)) / step <= MAX_POINTS


async def scraping(prometheus: str) -> None:
    async def up() -> bool:
        async with (
            aiohttp.ClientSession() as client,
            client.get(f"{prometheus}/api/v1/query", params={"query": 'up{job="dcgm"}'}) as response,
        ):
            result = (await response.json())["data"]["result"]
            return bool(result) and result[0]["value"][1] == "1"

    await eventually(up, timeout=30, what="Prometheus scraping the simulated dcgm-exporter")


def gpu_run(name: str, utilization: float, runtime: float) -> dict[str, Any]:
    obj = job(name, gpus=2, runtime=runtime)
    obj["metadata"]["annotations"][dcgm.ANNOTATION] = str(utilization)
    return obj


async def test_a_run_shorter_than_a_read_is_measured_whole_when_it_ends(tmp_path: Path, migrated_url: str) -> None:
    """Reads every 6 s, runs of 3 s: the periodic reads would see none of them (or a part); each
    ended run is asked of Prometheus over its whole interval and its rows are measured for all the
    time they ran, busy by the run's mean, however the periodic reads fell."""
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", NODE))
        await w.apply(CONFIG)
        target = urlparse(w.host.url).netloc
        async with running(tmp_path / "prometheus", target, dcgm.PATH, honor_labels=False) as prometheus:
            await scraping(prometheus)  # (Prometheus's first scrape comes some seconds after it starts)
            w.start_controller("replica-1", policy=Policy(prometheus_url=prometheus, reclaim_interval=6.0))
            await w.create(gpu_run("short-a", 0.3, 300.0))  # 3 s at the world's time scale
            await w.create(gpu_run("short-b", 0.8, 300.0))

            async def measured(name: str) -> Any:
                row = await _ledger(w, name)
                return row if row is not None and row.ended_at is not None and row.measured_seconds > 0 else None

            for name, utilization in (("short-a", 0.3), ("short-b", 0.8)):
                row = await eventually(lambda n=name: measured(n), timeout=40, what=f"{name}'s run measured whole")
                ran = (row.ended_at - row.running_at).total_seconds()
                assert 2.0 < ran < 10 and abs(row.measured_seconds - ran) < 1e-3, (row.measured_seconds, ran)
                assert abs(row.busy_seconds / row.measured_seconds - utilization) < 0.02, (name, row.busy_seconds)
