"""Idle-GPU reclaim end to end: the simulated cluster's dcgm-exporter, scraped by a real
Prometheus (as through a ServiceMonitor: the pod labels arrive as ``exported_pod``), read by the
controller, which evicts an idle job with reason ``GPUIdle`` when another waits for its quota,
warns where the policy says warn, never touches a job without data or one kept by
``turnstile.dev/keep-until``, and reclaims nothing while Prometheus cannot be read."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sqlalchemy import select

from admission.kube.client import ResourceRef
from admission.policy import Policy
from admission.sim.operators import autoscaler as sim_autoscaler
from admission.sim.operators import dcgm
from admission.store import database, tables
from tests.admission.controller.world import World, eventually, job, world
from tests.prometheus import needs_prometheus, running

pytestmark = needs_prometheus

NODES = ResourceRef("v1", "Node", "nodes", namespaced=False)
NODE = {"labels": {"gpu": "a100"}, "capacity": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}}


def config(action: str, *, quota: int = 4) -> str:
    policy = json.dumps({"threshold": 0.3, "window": "2s", "grace": "0s", "action": action, "onlyWhenContended": True})
    return f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: a100}}
spec: {{nodeLabels: {{gpu: a100}}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: team-a
  annotations: {{turnstile.dev/idle-reclaim: '{policy}'}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{{name: a100, resources: [{{name: nvidia.com/gpu, nominalQuota: "{quota}"}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: team-a, namespace: ml}}
spec: {{clusterQueue: team-a}}
"""


def gpu_job(name: str, utilization: float | None, gpus: int = 4, **annotations: str) -> dict[str, Any]:
    obj = job(name, gpus=gpus)
    if utilization is not None:
        obj["metadata"]["annotations"][dcgm.ANNOTATION] = str(utilization)
    obj["metadata"]["annotations"].update(annotations)
    return obj


async def _row(w: World, name: str) -> Any:
    async with database.transaction(w.sessions) as s:
        return (await s.execute(select(tables.Workload).where(tables.Workload.name == name))).scalar_one_or_none()


async def _events(w: World, name: str) -> list[tuple[str, str]]:
    events = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
    return [(e["reason"], e["message"]) for e in events["items"] if e["involvedObject"]["name"] == name]


async def _started(w: World, name: str) -> bool:
    r = await _row(w, name)
    return r is not None and r.state == "Admitted" and (await w.get(name))["spec"]["suspend"] is False


def _policy(prometheus: str) -> Policy:
    return Policy(prometheus_url=prometheus, reclaim_interval=0.5)


async def test_an_idle_job_is_requeued_for_the_one_waiting_and_a_busy_one_is_left(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", NODE))
        await w.apply(config("requeue"))
        target = urlparse(w.host.url).netloc
        async with running(tmp_path / "prometheus", target, dcgm.PATH, honor_labels=False) as prometheus:
            controller = w.start_controller("replica-1", policy=_policy(prometheus))
            await w.create(gpu_job("notebook", 0.05))
            await eventually(lambda: _started(w, "notebook"), what="the idle notebook running")
            await w.create(gpu_job("train", 0.9))  # waits: the quota (4) is the notebook's

            async def reclaimed() -> list[str]:
                return [m for r, m in await _events(w, "notebook") if r == "GPUIdle"]

            (message,) = await eventually(reclaimed, timeout=20, what="a GPUIdle eviction")
            assert "GPU utilisation 5 % < 30 % over 2s" in message and "Requeued" in message, message
            await eventually(lambda: _started(w, "train"), timeout=10, what="the waiting job admitted")
            r = await _row(w, "notebook")
            assert r.state == "Pending" and r.active, "requeued (after a backoff), not deactivated"
            history = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
            assert not any(
                e["reason"] == "GPUIdle" and e["involvedObject"]["name"] == "train" for e in history["items"]
            )
            assert controller.features.reclaimer.problem is None
            metrics = controller.metrics.render().decode()
            assert 'turnstile_gpu_idle_workloads_total{action="requeued",cluster_queue="team-a"} 1.0' in metrics


async def test_warn_only_says_it_and_unknown_or_kept_jobs_are_never_idle(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", NODE))
        await w.apply(config("warn", quota=8))
        target = urlparse(w.host.url).netloc
        async with running(tmp_path / "prometheus", target, dcgm.PATH) as prometheus:
            w.start_controller("replica-1", policy=_policy(prometheus))
            later = (dt.datetime.now(dt.UTC) + dt.timedelta(days=3650)).isoformat()
            await w.create(gpu_job("idle", 0.1, gpus=2))
            await w.create(gpu_job("blind", None, gpus=2))  # no series: unknown
            await w.create(gpu_job("kept", 0.0, gpus=2, **{"turnstile.dev/keep-until": later}))
            await w.create(gpu_job("queued", 0.9, gpus=4))  # waits for the others' quota
            for name in ("idle", "blind", "kept"):
                await eventually(lambda n=name: _started(w, n), what=f"{name} running")

            async def warned() -> list[str]:
                return [m for r, m in await _events(w, "idle") if r == "GPUIdle"]

            (message,) = await eventually(warned, timeout=20, what="a GPUIdle warning")
            assert message == "GPU utilisation 10 % < 30 % over 2s; warned only", message
            # (a keep-until ten years ahead is capped by maxKeep, 24 h by default: still kept now)
            for name in ("blind", "kept"):
                assert not [m for r, m in await _events(w, name) if r == "GPUIdle"], name
                assert (await _row(w, name)).state == "Admitted"
            assert (await _row(w, "idle")).state == "Admitted", "warn evicts nothing"


async def test_prometheus_unreachable_reclaims_nothing_and_says_so(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", NODE))
        await w.apply(config("requeue"))
        controller = w.start_controller("replica-1", policy=_policy("http://127.0.0.1:9"))  # nothing listens
        await w.create(gpu_job("notebook", 0.0))
        await eventually(lambda: _started(w, "notebook"), what="running")
        await w.create(gpu_job("train", 0.9))
        problem = await eventually(lambda: controller.features.reclaimer.problem, what="a readiness note")
        assert problem.startswith("GPU utilisation cannot be read: http://127.0.0.1:9"), problem
        assert "turnstile_gpu_utilization_readable 0.0" in controller.metrics.render().decode()
        # (on a loaded machine the readiness note can come before train's row is stored: wait for the row)
        await eventually(lambda: _row(w, "train"), what="train's workload row")
        assert (await _row(w, "notebook")).state == "Admitted" and (await _row(w, "train")).state == "Pending"
