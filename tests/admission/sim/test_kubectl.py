"""kubectl, a client nobody here wrote, against the simulated API server (when kubectl is on PATH)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from admission.sim.host import SimHost
from tests.admission.runner import KUBECTL, kubectl

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")


@pytest_asyncio.fixture
async def kubeconfig(tmp_path: Path) -> AsyncIterator[Path]:
    host = await SimHost.start(tmp_path / "kubeconfig")
    yield host.kubeconfig
    await host.stop()


JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "demo", "namespace": "team-a"},
    "spec": {
        "suspend": True,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
    },
}


async def test_kubectl_round_trip(kubeconfig: Path) -> None:
    code, out, _ = await kubectl(kubeconfig, "version", "-o", "json")
    assert code == 0 and json.loads(out)["serverVersion"]["gitVersion"] == "v1.30.0-turnstile-sim"
    assert (await kubectl(kubeconfig, "create", "namespace", "team-a"))[0] == 0
    code, out, err = await kubectl(kubeconfig, "create", "--validate=false", "-f", "-", stdin=json.dumps(JOB))
    assert code == 0, err
    code, out, _ = await kubectl(kubeconfig, "patch", "job", "demo", "-n", "team-a", "-p", '{"spec":{"suspend":false}}')
    assert code == 0 and "patched" in out
    code, out, _ = await kubectl(kubeconfig, "get", "job", "demo", "-n", "team-a", "-o", "json")
    got = json.loads(out)
    assert got["spec"]["suspend"] is False and got["metadata"]["generation"] == 2
    stale = dict(JOB, metadata={**JOB["metadata"], "resourceVersion": "1"})  # type: ignore[dict-item]
    code, _, err = await kubectl(kubeconfig, "replace", "--validate=false", "-f", "-", stdin=json.dumps(stale))
    assert code != 0 and "the object has been modified" in err
    assert (await kubectl(kubeconfig, "delete", "job", "demo", "-n", "team-a"))[0] == 0
    code, _, err = await kubectl(kubeconfig, "get", "job", "demo", "-n", "team-a")
    assert code != 0 and 'jobs.batch "demo" not found' in err
