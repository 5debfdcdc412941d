"""A whole Turnstile installation in one test: simulated cluster, PostgreSQL, the controller.

Everything is real and talks over real connections: the controller reaches the simulated API
server over HTTP through kubernetes_asyncio with a kubeconfig, and PostgreSQL over asyncpg.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from admission.app import wiring
from admission.controller.controller import Controller
from admission.controller.parts import Options
from admission.jobs import BY_KIND
from admission.kube import client as kube_client
from admission.kube.client import Kube, ResourceRef
from admission.policy import DEFAULT_POLICY
from admission.sim.host import SimHost
from admission.sim.server import resources
from admission.sim.server.faults import Faults
from admission.sim.server.objects import Resource
from admission.store import config as config_store
from admission.store import database, tables
from queues.kueue import codec

JOBS = ResourceRef("batch/v1", "Job", "jobs")
GPU = "nvidia.com/gpu"

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec:
  nodeLabels: {gpu: a100}
  nodeTaints: [{key: gpu, value: a100, effect: NoSchedule}]
  tolerations: [{key: gpu, operator: Equal, value: a100, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: "8"}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
"""


def job(
    name: str,
    *,
    gpus: int = 4,
    runtime: float | None = None,
    queue: str | None = "team-a",
    priority: str | None = None,
    suspend: bool = True,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    annotations = {"turnstile.dev/sim-runtime": str(runtime)} if runtime is not None else {}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
            }
        ],
    }
    if node_selector:
        pod["nodeSelector"] = node_selector
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": labels, "annotations": annotations},
        "spec": {"suspend": suspend, "parallelism": 1, "completions": 1, "template": {"spec": pod}},
    }


@dataclass
class World:
    host: SimHost
    kube: Kube  # the test's own client (a user with kubectl)
    sessions: async_sessionmaker[AsyncSession]
    url: str
    controllers: list[tuple[Controller, asyncio.Task[None]]]
    controller_kube: Kube  # the controllers' client: its ``answers`` are theirs alone
    engines: list[AsyncEngine] = field(default_factory=list)  # the controllers' own, if any

    async def apply(self, text: str) -> None:
        objects = [codec.parse(doc) for doc in yaml.safe_load_all(text) if doc]
        async with database.transaction(self.sessions) as s:
            await config_store.apply(s, objects, actor="test")

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.kube.create(JOBS, obj["metadata"]["namespace"], obj)

    async def get(self, name: str) -> dict[str, Any]:
        return await self.kube.get(JOBS, "ml", name)

    async def started(self, ref: ResourceRef, name: str) -> dict[str, Any] | None:
        """Job ``name`` of kind ``ref`` in namespace ml as it is, once unsuspended (None while it is suspended)."""
        current = await self.kube.get(ref, "ml", name)
        return None if BY_KIND[(ref.api_version, ref.kind)].is_suspended(current) else current

    async def billed(self, name: str) -> tuple[str, list[tuple[str, int]]]:
        """Workload ``name``'s kind and its ledger intervals, (resource, quantity) each, in order."""
        async with database.transaction(self.sessions) as s:
            row = (await s.execute(select(tables.Workload).where(tables.Workload.name == name))).scalar_one()
            found = await s.execute(
                select(tables.UsageInterval)
                .where(tables.UsageInterval.workload_id == row.id)
                .order_by(tables.UsageInterval.id)
            )
            return row.kind, [(i.resource, i.quantity) for i in found.scalars()]

    def start_controller(self, identity: str, *, database_url: str | None = None, **options: Any) -> Controller:
        """A controller in this process; ``database_url``: its own connection to the database (e.g.
        through a fault-injecting proxy), named turnstile-controller in pg_stat_activity."""
        sessions = self.sessions
        policy = options.pop("policy", DEFAULT_POLICY)
        if database_url is not None:
            engine = database.make_engine(
                database_url,
                idle_in_transaction_timeout=2.0,
                command_timeout=4.0,
                application_name="turnstile-controller",
            )
            self.engines.append(engine)
            sessions = database.sessions(engine)
        controller = wiring.controller(
            kube=self.controller_kube,
            sessions=sessions,
            database_url=database_url or self.url,
            options=Options(identity=identity, lease_ttl=options.pop("lease_ttl", 2.0), **options),
            policy=policy,
        )
        self.controllers.append((controller, asyncio.create_task(controller.run())))
        return controller

    async def stop_controller(self, controller: Controller) -> None:
        for c, task in list(self.controllers):
            if c is controller:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                self.controllers.remove((c, task))


async def eventually(check: Callable[[], Any], *, timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}; last saw {last!r}")


@contextlib.asynccontextmanager
async def world(
    tmp_path: Path,
    url: str,
    *,
    faults: Faults | None = None,
    time_scale: float = 0.01,
    autoscaler: dict[str, Any] | None = None,
    crds: tuple[Resource, ...] = resources.OPERATORS,
) -> AsyncIterator[World]:
    host = await SimHost.start(
        tmp_path / "kubeconfig", time_scale=time_scale, faults=faults, autoscaler=autoscaler, crds=crds
    )
    kube = Kube(await kube_client.connect(host.kubeconfig))
    await kube.create(kube_client.NAMESPACES, None, {"metadata": {"name": "ml"}})
    engine = database.make_engine(url, idle_in_transaction_timeout=2.0)
    w = World(host, kube, database.sessions(engine), url, [], Kube(await kube_client.connect(host.kubeconfig)))
    try:
        yield w
    finally:
        for controller, _ in list(w.controllers):
            await w.stop_controller(controller)
        await kube.close()
        await w.controller_kube.close()
        for extra in w.engines:
            await extra.dispose()
        await engine.dispose()
        await host.stop()
