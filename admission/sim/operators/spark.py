"""The Spark operator, and the Spark driver's making of its executors, in the simulated cluster.

A real SparkApplication's pods come in two steps, both through the API server (so admission webhooks
see each one, as Turnstile's pod webhook does): the operator's ``spark-submit`` creates the driver pod,
owned by the app; the driver then creates its executor pods, owned by the *driver pod*. The operator
copies the app's labels onto both, with ``sparkoperator.k8s.io/app-name``,
``sparkoperator.k8s.io/launched-by-spark-operator`` and ``spark-role`` (``queues.podsets.sparkapps``):
an executor carries the app's ``kueue.x-k8s.io/queue-name`` label but no owner a queue knows, which
is why the pod webhook knows Spark pods by those labels.

Here both steps run as one task per app start: the driver pod, then its executors, created through
``ApiServer.create`` as the operator's and the driver's service accounts. Differences from the real
ones (docs/simulated-cluster.md): pods are named ``<app>-driver-0`` and ``<app>-executor-<i>`` (not
``<app>-driver`` and ``<app>-<id>-exec-<n>``); executors are made as soon as the driver pod exists,
not once it runs; a suspended app's pods are deleted at once; the app completes when every pod has
succeeded (the real driver ends its executors); ``applicationState`` goes SUBMITTED, RUNNING (its driver
runs), COMPLETED, or SUSPENDING, SUSPENDED (``admission.sim.operators.statuses``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from admission.sim.server.objects import ApiError, Obj
from admission.sim.server.resources import BUILT_IN
from queues.podsets import sparkapps

if TYPE_CHECKING:
    from admission.sim.server.apiserver import ApiServer

log = logging.getLogger(__name__)

PODS = next(r for r in BUILT_IN if r.plural == "pods" and not r.group)
SERVICE_ACCOUNTS = ["system:serviceaccounts"]
OPERATOR = {"username": "system:serviceaccount:spark-operator:spark-operator-controller", "groups": SERVICE_ACCOUNTS}

# (pod set, index) -> the pod's body, owned by the app; the operator or the driver names its owner
Bodies = list[tuple[str, int, Obj]]


def pod_labels(job: Obj, labels: dict[str, str]) -> dict[str, str]:
    """A Spark pod's labels: the app's, then the pod's own, then the operator's."""
    return {**(job["metadata"].get("labels") or {}), **labels, **sparkapps.pod_labels(job["metadata"]["name"])}


class SparkPods:
    """Starts an app's pods through the API server, the driver's first (see the module docstring)."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api
        self.starting: set[str] = set()  # apps (by uid) whose pods are being created
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, job: Obj, bodies: Bodies) -> None:
        uid = job["metadata"]["uid"]
        if uid in self.starting:
            return  # (its pods are on their way; their events reconcile the app)
        self.starting.add(uid)
        task = asyncio.create_task(self._create(job, bodies))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _create(self, job: Obj, bodies: Bodies) -> None:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        driver_user = {"username": f"system:serviceaccount:{namespace}:spark", "groups": SERVICE_ACCOUNTS}
        try:
            driver: Obj | None = None
            for ps_name, _, body in sorted(bodies, key=lambda b: b[0] != sparkapps.DRIVER):
                if ps_name == sparkapps.DRIVER:
                    driver, _ = await self.api.create(PODS, namespace, body, user=OPERATOR)
                    continue
                if driver is not None:  # an executor is its driver pod's
                    owner = {"apiVersion": "v1", "kind": "Pod", "name": driver["metadata"]["name"],
                             "uid": driver["metadata"]["uid"], "controller": True}  # fmt: skip
                    body["metadata"]["ownerReferences"] = [owner]
                await self.api.create(PODS, namespace, body, user=driver_user)
        except ApiError as exc:
            log.warning("SparkApplication %s/%s: a pod was refused: %s", namespace, name, exc)
        finally:
            self.starting.discard(job["metadata"]["uid"])
