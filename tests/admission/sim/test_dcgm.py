"""The simulated dcgm-exporter (``admission.sim.operators.dcgm``): dcgm-exporter's series for the GPUs of
running pods, read over HTTP as Prometheus would scrape them."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import urllib.request
from pathlib import Path

from admission.sim.host import SimHost
from admission.sim.operators import dcgm
from tests.admission.runner import kubectl


def job(name: str, gpus: str, annotations: dict[str, str]) -> str:
    return json.dumps(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {
                "parallelism": 1,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "train", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
                        ],
                    }
                },
            },
        }
    )


def scrape(url: str) -> list[str]:
    with urllib.request.urlopen(url + dcgm.PATH, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return [line for line in response.read().decode().splitlines() if not line.startswith("#")]


async def test_running_pods_get_dcgm_series_from_their_jobs_annotation(tmp_path: Path) -> None:
    host = await SimHost.start(tmp_path / "kubeconfig", default_runtime=600.0)
    try:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"},
                "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}  # fmt: skip
        assert (await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(node)))[0] == 0
        idle = job("idle", "2", {dcgm.ANNOTATION: "0.08"})
        unknown = job("unknown", "1", {})  # no data: no series (unknown, never "idle")
        for body in (idle, unknown):
            code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=body)
            assert code == 0, err
        lines: list[str] = []
        for _ in range(200):
            lines = await asyncio.to_thread(scrape, host.url)  # (the server runs on this loop)
            if len(lines) == 4:
                break
            await asyncio.sleep(0.05)
        active = sorted(line for line in lines if line.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
        util = [line for line in lines if line.startswith("DCGM_FI_DEV_GPU_UTIL")]
        assert len(active) == 2 and len(util) == 2, lines  # one per GPU of the idle job's pod
        assert all('Hostname="gpu-1"' in a and 'namespace="default"' in a and 'container="train"' in a for a in active)
        assert all(a.split('pod="')[1].startswith("idle-") and a.endswith("} 0.08") for a in active), active
        assert {a.split('gpu="')[1].split('"')[0] for a in active} == {"0", "1"}
        assert all(u.endswith("} 8") for u in util), util
    finally:
        await host.stop()


def test_mig_series_carry_the_instance_profile_and_a_bad_value_is_no_data() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "annotations": {dcgm.ANNOTATION: "0.5"}},
        "spec": {
            "nodeName": "n",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}],
        },
        "status": {"phase": "Running"},
    }
    lines = dcgm.exposition([pod], lambda _p: None).splitlines()
    active = next(line for line in lines if line.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{"))
    assert 'GPU_I_PROFILE="1g.10gb"' in active and active.endswith("} 0.5")
    pod["metadata"]["annotations"][dcgm.ANNOTATION] = "idle"
    assert not any(line.startswith("DCGM") for line in dcgm.exposition([pod], lambda _p: None).splitlines())


def test_a_trace_steps_with_the_pods_time_scaled_and_an_unreadable_one_is_no_data() -> None:
    """A scenario's ``utilization`` list as engine cluster plays it: steps at seconds since the pod
    started, times the cluster's time scale."""
    pod = {
        "metadata": {"name": "p", "namespace": "ml",
                     "annotations": {dcgm.ANNOTATION: '[{"at": 0, "value": 0.1}, {"at": 900, "value": 0.9}]'}},
        "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "startTime": "2026-12-02T10:00:00Z"},
    }  # fmt: skip
    started = dt.datetime(2026, 12, 2, 10, tzinfo=dt.UTC).timestamp()

    def value(wall_seconds: float) -> str:
        lines = dcgm.exposition([pod], lambda _p: None, now=started + wall_seconds, time_scale=0.02).splitlines()
        return next(line for line in lines if line.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{")).rsplit(" ", 1)[1]

    assert value(17.0) == "0.1"  # 850 scenario seconds in
    assert value(19.0) == "0.9"  # 950
    pod["metadata"]["annotations"][dcgm.ANNOTATION] = '[{"at": 0}]'
    assert not any(line.startswith("DCGM") for line in dcgm.exposition([pod], lambda _p: None).splitlines())


def test_gpu_memory_series_say_used_and_free_per_gpu_of_the_nodes_card_or_the_slice() -> None:
    """``turnstile.dev/sim-gpu-memory-used: 9Gi`` on a job: each of its pod's GPUs reports 9216 MiB
    used and the rest of the card free, the card's size from the node's GPU feature discovery
    label; a MIG slice's size is its profile's; a pod with only memory said has no utilisation."""
    job = {"metadata": {"name": "j", "annotations": {dcgm.MEMORY_ANNOTATION: "9Gi"}}}
    pod = {
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"nodeName": "h200-1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": "Running"},
    }
    labels = {"h200-1": {dcgm.GPU_MEMORY_LABEL: "143771", dcgm.GPU_PRODUCT_LABEL: "NVIDIA-H200"}}
    lines = dcgm.exposition([pod], lambda _p: job, node_labels=labels).splitlines()
    used = [line for line in lines if line.startswith("DCGM_FI_DEV_FB_USED{")]
    free = [line for line in lines if line.startswith("DCGM_FI_DEV_FB_FREE{")]
    assert len(used) == 2 and all(u.endswith("} 9216") and 'modelName="NVIDIA-H200"' in u for u in used), used
    assert all(f.endswith(f"}} {143771 - 9216}") for f in free), free
    assert not any(line.startswith(("DCGM_FI_PROF", "DCGM_FI_DEV_GPU_UTIL")) for line in lines)
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.18gb": "1"}
    (slice_free,) = [
        line for line in dcgm.exposition([pod], lambda _p: job).splitlines() if line.startswith("DCGM_FI_DEV_FB_FREE{")
    ]
    assert slice_free.endswith(f"}} {18 * 0.88 * 1024 - 9216:.0f}"), slice_free
