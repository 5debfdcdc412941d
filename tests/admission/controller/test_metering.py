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

from sqlalchemy import select

from admission.kube.client import ResourceRef
from admission.policy import Policy
from admission.sim import autoscaler as sim_autoscaler
from admission.sim import dcgm
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
