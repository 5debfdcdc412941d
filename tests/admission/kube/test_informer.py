"""Informers against the simulated API server over real HTTP: how fast they recover from refusals."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError
from admission.kube.informer import BACKOFF_MAX, Informer
from admission.sim.host import SimHost
from admission.sim.server.faults import Faults

CONFIGMAPS = kube_client.ResourceRef("v1", "ConfigMap", "configmaps")


async def test_a_kind_refused_with_403_is_listed_again_within_seconds(tmp_path: Path) -> None:
    """A real API server answers 403 while its RBAC cache loads after a restart (or before the
    install's RBAC is applied): an optional informer must be back within seconds once it may list,
    not after the minute an uninstalled CRD waits."""
    faults = Faults()
    host = await SimHost.start(tmp_path / "kubeconfig", faults=faults)
    kube = Kube(await kube_client.connect(host.kubeconfig))
    await kube.create(CONFIGMAPS, "default", {"metadata": {"name": "queues"}})
    faults.forbidden.add("configmaps")
    seen: list[str] = []
    informer = Informer(kube, CONFIGMAPS, lambda kind, obj: seen.append(obj["metadata"]["name"]), optional=True)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 5)
        assert informer.absent and informer.forbidden and seen == []
        await asyncio.sleep(1.0)  # refused a few times meanwhile: the backoff grows
        faults.forbidden.clear()  # RBAC loaded
        allowed_at = time.monotonic()
        while "queues" not in seen:
            assert time.monotonic() - allowed_at < BACKOFF_MAX * 1.25 + 1, "not listed again within seconds"
            await asyncio.sleep(0.05)
        assert not informer.absent
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kube.close()
        await host.stop()


async def test_a_kind_not_installed_is_an_answer_not_a_failed_call(tmp_path: Path) -> None:
    """An optional informer of a CRD that is not installed hears 404: said once, never counted among the
    API server's refusals (turnstile_kube_responses_total, where a 4xx means a bug)."""
    host = await SimHost.start(tmp_path / "kubeconfig")
    kube = Kube(await kube_client.connect(host.kubeconfig))
    widgets = kube_client.ResourceRef("example.com/v1", "Widget", "widgets")
    informer = Informer(kube, widgets, lambda kind, obj: None, optional=True)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 5)
        assert informer.absent and not informer.forbidden
        assert kube.refused() == 0, kube.answers
        with pytest.raises(KubeError):  # any other 404 still counts
            await kube.get(CONFIGMAPS, "default", "none")
        assert kube.refused() == 1, kube.answers
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kube.close()
        await host.stop()
