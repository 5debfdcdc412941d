"""Right-sizing end to end: the simulated dcgm-exporter's GPU memory scraped by a real
Prometheus, read by the controller into the ledger (while a job runs, and whole when its run
ends), and judged by ``turnstile rightsize`` and ``describe workload``."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from admission.kube.client import ResourceRef
from admission.policy import Policy
from admission.sim.operators import autoscaler as sim_autoscaler
from admission.sim.operators import dcgm
from tests.admission.controller.test_metering import _ledger, scraping
from tests.admission.controller.world import eventually, job, world
from tests.admission.runner import turnstile
from tests.prometheus import needs_prometheus, running

pytestmark = needs_prometheus

NODES = ResourceRef("v1", "Node", "nodes", namespaced=False)
H200 = {
    "labels": {"gpu": "h200", dcgm.GPU_MEMORY_LABEL: "143771", dcgm.GPU_PRODUCT_LABEL: "NVIDIA-H200"},
    "capacity": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"},
}
CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h200}
spec: {nodeLabels: {gpu: h200}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {gpu: a100, nvidia.com/gpu.memory: "81920"}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h200-mig}
spec: {nodeLabels: {gpu: h200-mig}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - {name: h200, resources: [{name: nvidia.com/gpu, nominalQuota: "8"}]}
    - {name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: "8"}]}
  - coveredResources: [nvidia.com/mig-1g.18gb, nvidia.com/mig-1g.35gb, nvidia.com/mig-3g.71gb]
    flavors:
    - name: h200-mig
      resources:
      - {name: nvidia.com/mig-1g.18gb, nominalQuota: "14"}
      - {name: nvidia.com/mig-1g.35gb, nominalQuota: "8"}
      - {name: nvidia.com/mig-3g.71gb, nominalQuota: "4"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
"""


def gpu_job(name: str, *, memory: str, utilization: float, runtime: float | None = None) -> dict[str, Any]:
    obj = job(name, gpus=1, runtime=runtime)
    obj["metadata"].setdefault("labels", {})["team"] = "vision"
    obj["metadata"]["annotations"][dcgm.ANNOTATION] = str(utilization)
    obj["metadata"]["annotations"][dcgm.MEMORY_ANNOTATION] = memory
    return obj


async def test_a_job_that_peaked_at_9_gib_of_an_h200_is_told_a_1g_18gb_slice_would_do(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", H200))
        await w.apply(CONFIG)
        target = urlparse(w.host.url).netloc
        async with running(tmp_path / "prometheus", target, dcgm.PATH, honor_labels=False) as prometheus:
            await scraping(prometheus)
            w.start_controller("replica-1", policy=Policy(prometheus_url=prometheus, reclaim_interval=1.0))
            await w.create(gpu_job("small", memory="9Gi", utilization=0.31, runtime=300.0))  # 3 s
            await w.create(gpu_job("big", memory="100Gi", utilization=0.2))  # runs on
            await w.create(gpu_job("busy", memory="9Gi", utilization=0.9))
            await w.create(gpu_job("notebook", memory="12Gi", utilization=0.05))  # runs on
            await w.create(gpu_job("mid", memory="60Gi", utilization=0.2))  # no slice holds it; an A100 does

            async def measured(name: str, ended: bool) -> Any:
                row = await _ledger(w, name)
                if row is None or row.memory_peak_mib is None or row.memory_seconds <= 0:
                    return None
                if not ended:
                    return row if row.ended_at is None else None
                # (measured whole once the run ended: the time it ran, whatever the reads covered)
                whole = row.ended_at is not None and row.running_at is not None
                return (
                    row
                    if whole and abs(row.memory_seconds - (row.ended_at - row.running_at).total_seconds()) < 1e-3
                    else None
                )

            small = await eventually(lambda: measured("small", True), timeout=40, what="small's run measured")
            big = await eventually(lambda: measured("big", False), timeout=40, what="big measured while it runs")
            await eventually(lambda: measured("busy", False), timeout=40, what="busy measured while it runs")
            await eventually(lambda: measured("notebook", False), timeout=40, what="notebook measured while it runs")
            await eventually(lambda: measured("mid", False), timeout=40, what="mid measured while it runs")
            assert small.memory_peak_mib == 9 * 1024 and small.memory_total_mib == 143771
            assert abs(small.memory_mib_seconds / small.memory_seconds - 9 * 1024) < 1
            assert big.memory_peak_mib == 100 * 1024

            env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url, "TURNSTILE_HOME": str(tmp_path / "home")}
            done = await asyncio.to_thread(
                turnstile, "rightsize", "--since", "1h", "--by", "label:team", "--all", "-o", "json", env=env
            )
            assert done.returncode == 0, done.stderr
            body = json.loads(done.stdout)
            verdicts = {r["workload"]: r for r in body["workloads"]}
            assert body["offered"] == ["nvidia.com/mig-1g.18gb", "nvidia.com/mig-1g.35gb", "nvidia.com/mig-3g.71gb"]
            one = verdicts["small"]
            assert one["suggestion"] == "nvidia.com/mig-1g.18gb" and one["freedPerGpu"] == "6/7", one
            assert one["message"] == (
                "peaked at 9 GiB of 140.4 GiB, 31 % busy: a 1g.18gb slice would do; 6/7 of a card freed"
            ), one
            assert abs(one["gpuHoursSaved"] - one["gpuHours"] * 6 / 7) < 1e-6 and one["gpuHours"] > 0
            # 100 GiB fits no offered slice (3g.71gb gives 62 GiB); a busy GPU is kept whole
            assert verdicts["big"]["suggestion"] is None and verdicts["big"]["message"].endswith(
                "nothing smaller the install offers holds it"
            )
            mid = verdicts["mid"]
            assert mid["suggestion"] == "nvidia.com/gpu" and mid["suggestedFlavor"] == "a100", mid
            assert mid["message"].endswith("a GPU of flavor a100 (80 GiB) would do; the whole card of 140.4 GiB freed")
            assert abs(mid["gpuHoursSaved"] - mid["gpuHours"]) < 1e-6 and body["offeredFlavors"] == {"a100": 81920.0}
            assert verdicts["busy"]["suggestion"] is None and "90 % busy: kept" in verdicts["busy"]["message"]
            (team,) = body["groups"]
            assert team["group"] == "vision" and team["workloads"] == 5 and team["fitting"] == 3
            saved = one["gpuHoursSaved"] + verdicts["notebook"]["gpuHoursSaved"] + mid["gpuHoursSaved"]
            assert abs(team["gpuHoursSaved"] - saved) < 1e-5

            table = await asyncio.to_thread(turnstile, "rightsize", "--since", "1h", env=env)
            assert table.returncode == 0, table.stderr
            assert "ml/small" in table.stdout and "ml/big" not in table.stdout, table.stdout
            assert "3 of 5 measured workloads would fit a smaller slice" in table.stdout, table.stdout

            # a running workload's describe says the same (a finished one is in usage and rightsize)
            for name in ("notebook", "big"):
                described = await asyncio.to_thread(turnstile, "describe", "workload", f"ml/{name}", env=env)
                assert described.returncode == 0, described.stderr
                said = verdicts[name]["message"]
                assert f"GPU memory:    {said}" in described.stdout, described.stdout
            assert verdicts["notebook"]["message"].startswith("peaked at 12 GiB of 140.4 GiB, 5 % busy: a 1g.18gb")
