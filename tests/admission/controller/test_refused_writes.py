"""The enactor's writes the API server refuses: counted, and logged naming the object."""

from __future__ import annotations

from pathlib import Path

import pytest

from admission.controller.enactor import Enactor
from admission.controller.watch.jobcache import JobCache
from admission.controller.workqueue import Retry
from admission.jobs.batch import JOB
from admission.kube import client as kube_client
from admission.kube.client import Kube
from admission.sim.host import SimHost


async def test_a_refused_patch_names_the_object(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A 422 (here: a running Job's pod template is immutable) is counted and logged with the job it was for,
    and the job is looked at again."""
    host = await SimHost.start(tmp_path / "kubeconfig")
    kube = Kube(await kube_client.connect(host.kubeconfig))
    try:
        spec = {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}
        running = await kube.create(JOB.ref, "default", {"metadata": {"name": "train"}, "spec": spec})
        enactor = Enactor(kube, jobs=JobCache(), current_term=lambda: None, workers=1)
        change = [{"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"gpu": "a100"}}]
        with pytest.raises(Retry):
            await enactor._patch(JOB.view(running), change)
        assert kube.answers[("PATCH", 422)] == 1
        said = [r.getMessage() for r in caplog.records if "refused the write" in r.getMessage()]
        assert said and said[0].startswith("Job default/train: the API server refused the write (422"), said
    finally:
        await kube.close()
        await host.stop()
