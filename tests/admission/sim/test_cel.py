"""The simulated API server evaluates CRDs' CEL rules as the real one does, and Kueue's (as
written by ``queues.kueue.crds``) refuse what Kueue's CRDs refuse, with no webhook installed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError, ResourceRef
from admission.sim.host import SimHost

CQS = ResourceRef("kueue.x-k8s.io/v1beta2", "ClusterQueue", "clusterqueues", namespaced=False)
LQS = ResourceRef("kueue.x-k8s.io/v1beta2", "LocalQueue", "localqueues")
TOPOLOGIES = ResourceRef("kueue.x-k8s.io/v1beta2", "Topology", "topologies", namespaced=False)


@pytest_asyncio.fixture
async def kube(tmp_path: Path) -> AsyncIterator[Kube]:
    host = await SimHost.start(tmp_path / "kubeconfig", kueue=True)
    client = Kube(await kube_client.connect(host.kubeconfig))
    try:
        yield client
    finally:
        await client.close()
        await host.stop()


def cq(name: str, *, cohort: str | None = None, resources: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": "a", "resources": resources or [{"name": "cpu", "nominalQuota": "4"}]}],
            }
        ]
    }
    if cohort:
        spec["cohortName"] = cohort
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


async def refused(call: Any) -> str:
    with pytest.raises(KubeError) as caught:
        await call
    assert caught.value.status == 422, caught.value
    return caught.value.message


async def test_kueues_rules_refuse_what_kueue_refuses(kube: Kube) -> None:
    limited = [{"name": "cpu", "nominalQuota": "4", "borrowingLimit": "2"}]
    message = await refused(kube.create(CQS, None, cq("alone", resources=limited)))
    assert "borrowingLimit must be nil when cohort is empty" in message and "spec" in message, message
    await kube.create(CQS, None, cq("shared", cohort="c", resources=limited))  # with a cohort it is fine

    two = [{"name": "cpu", "nominalQuota": "4"}, {"name": "memory", "nominalQuota": "1Gi"}]
    message = await refused(kube.create(CQS, None, cq("uneven", resources=two)))
    assert "spec.resourceGroups[0]" in message and "same number of resources" in message, message

    lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
          "metadata": {"name": "q", "namespace": "default"}, "spec": {"clusterQueue": "shared"}}  # fmt: skip
    await kube.create(LQS, "default", lq)
    await kube.patch(LQS, "default", "q", {"spec": {"stopPolicy": "Hold"}})  # other fields may change
    message = await refused(kube.patch(LQS, "default", "q", {"spec": {"clusterQueue": "other"}}))
    assert "spec.clusterQueue" in message and "field is immutable" in message, message

    levels = [{"nodeLabel": "rack"}, {"nodeLabel": "rack"}]
    topology = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "t"},
                "spec": {"levels": levels}}  # fmt: skip
    message = await refused(kube.create(TOPOLOGIES, None, topology))
    assert "must have unique nodeLabel values" in message, message
