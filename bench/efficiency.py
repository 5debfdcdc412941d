"""Idle-GPU reclaim: a simulated week in which 20 % of the jobs idle on their GPUs.

One ClusterQueue of 64 GPUs, about 95 % of them asked for over a week (jobs of 1, 2, 4 or 8 GPUs
running 1 to 8 hours, from a fixed seed); a fifth of the jobs idle at 5 % utilisation (a
notebook left open, a stuck data loader), the rest run at 70-95 %. Four runs: no reclaim, and
reclaim below 30 % over 30 minutes after 10 minutes of grace with ``requeue`` (with and without
``onlyWhenContended``) and ``deactivate``. Printed per run: how many reclaims, the GPU-hours the
idle jobs held (burned doing nothing), the mean and p95 wait of the busy jobs, and the wall time
to simulate.

Then right-sizing (``queues.gpus.rightsizing``) on the no-reclaim week: each job also gets a peak GPU
memory per GPU (``gpuMemoryUsed``, from its own seed so the week is the same: idle notebooks
4-20 GiB; busy jobs a third 6-15 GiB, the rest 20-78 GiB of an 80 GB A100) and the ClusterQueue
offers A100 MIG slices (1g.10gb, 2g.20gb, 3g.40gb); printed: how many jobs a smaller slice would
have held and the GPU-hours that would have been freed (engine core's ``summary.rightsize``).
"""

from __future__ import annotations

import random
import time
from typing import Any

from queues.simulation import scenario, simulator

GPU = "nvidia.com/gpu"
GPUS = 64
WEEK = 7 * 24 * 3600


def _doc(policy: dict[str, Any] | None) -> dict[str, Any]:
    rng = random.Random(3)
    sizes, mean_runtime = (1, 2, 4, 8), 4.5 * 3600
    gap = (sum(sizes) / len(sizes)) * mean_runtime / (0.95 * GPUS)
    jobs, t, i = [], 0.0, 0
    while t < WEEK:
        t += rng.expovariate(1 / gap)
        idle = rng.random() < 0.2
        gpus = rng.choice(sizes)
        jobs.append(
            {
                "at": round(t),
                "runtime": rng.randrange(3600, 8 * 3600, 60),
                "utilization": 0.05 if idle else round(rng.uniform(0.7, 0.95), 2),
                "object": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": f"{'idle' if idle else 'busy'}-{i}", "namespace": "ml",
                                 "labels": {"kueue.x-k8s.io/queue-name": "q"}},
                    "spec": {"template": {"spec": {"containers": [
                        {"name": "c", "resources": {"limits": {GPU: str(gpus)}}}]}}},
                },
            }
        )  # fmt: skip
        i += 1
    manifests = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a100"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "resourceGroups": [
             {"coveredResources": [GPU], "flavors": [
                 {"name": "a100", "resources": [{"name": GPU, "nominalQuota": GPUS}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": "ml"},
         "spec": {"clusterQueue": "cq"}},
    ]  # fmt: skip
    doc: dict[str, Any] = {"name": "idle-week", "manifests": manifests, "jobs": jobs}
    if policy is not None:
        doc["reclaim"] = [{"clusterQueue": "cq", "threshold": 0.3, "window": "30m", "grace": "10m", **policy}]
    return doc


RUNS: dict[str, dict[str, Any] | None] = {
    "no reclaim": None,
    "requeue, only when contended": {"action": "requeue", "onlyWhenContended": True},
    "requeue, always": {"action": "requeue", "onlyWhenContended": False},
    "deactivate, only when contended": {"action": "deactivate", "onlyWhenContended": True},
}


def run(name: str) -> dict[str, Any]:
    doc = _doc(RUNS[name])
    gpus = {f"ml/{j['object']['metadata']['name']}": int(_gpu(j)) for j in doc["jobs"]}
    parsed = scenario.parse(doc)
    t0 = time.perf_counter()
    result = simulator.Simulation(parsed).run().to_json()
    wall = time.perf_counter() - t0
    waits = sorted(
        wl["admitted"] - wl["submitted"]
        for key, wl in result["workloads"].items()
        if key.split("/")[1].startswith("busy") and wl["admitted"] is not None
    )
    reclaim = result["summary"].get("reclaim", {})
    idle_seconds, since = 0.0, {}
    for e in result["events"]:
        if not e["workload"].split("/")[1].startswith("idle"):
            continue
        if e["type"] == "Admitted":
            since[e["workload"]] = e["t"]
        elif e["type"] in ("Evicted", "Finished") and e["workload"] in since:
            idle_seconds += (e["t"] - since.pop(e["workload"])) * gpus[e["workload"]]
    return {
        "idle": idle_seconds / 3600,
        "jobs": len(result["workloads"]),
        "wall": wall,
        "freed": reclaim.get("gpuHoursFreed", 0.0),
        "reclaims": reclaim.get("requeued", 0) + reclaim.get("deactivated", 0),
        "mean": sum(waits) / len(waits) if waits else 0.0,
        "p95": waits[int(0.95 * (len(waits) - 1))] if waits else 0.0,
    }


MIG = ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb")


def rightsizing() -> dict[str, Any]:
    """The no-reclaim week with each job's GPU memory and MIG slices offered: what right-sizing says."""
    doc = _doc(None)
    rng = random.Random(5)
    for job in doc["jobs"]:
        if job["object"]["metadata"]["name"].startswith("idle"):
            peak = rng.uniform(4, 20)
        else:
            peak = rng.uniform(6, 15) if rng.random() < 1 / 3 else rng.uniform(20, 78)
        job["gpuMemoryUsed"] = f"{round(peak * 1024)}Mi"
    cq = doc["manifests"][1]
    cq["spec"]["resourceGroups"].append(
        {"coveredResources": list(MIG), "flavors": [
            {"name": "a100-mig", "resources": [{"name": r, "nominalQuota": 8} for r in MIG]}]}
    )  # fmt: skip
    doc["manifests"].insert(
        1, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a100-mig"}}
    )
    t0 = time.perf_counter()
    summary = simulator.Simulation(scenario.parse(doc)).run().to_json()["summary"]["rightsize"]
    fitting = [w for w in summary["workloads"] if w["suggestion"]]
    by_slice: dict[str, int] = {}
    for w in fitting:
        by_slice[w["suggestion"]] = by_slice.get(w["suggestion"], 0) + 1
    return {
        "jobs": len(summary["workloads"]),
        "fitting": len(fitting),
        "idle": sum(1 for w in fitting if w["workload"].startswith("ml/idle")),
        "hours": summary["gpuHours"],
        "saved": summary["gpuHoursSaved"],
        "slices": by_slice,
        "wall": time.perf_counter() - t0,
    }


def _gpu(job: dict[str, Any]) -> str:
    return str(job["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU])


def main() -> None:
    print(f"\n== efficiency: a week on {GPUS} GPUs, 20 % of the jobs idle at 5 % ==")
    print(f"{'run':33} {'reclaims':>8} {'idle GPU-h':>11} {'busy wait mean':>15} {'p95':>8} {'wall':>6}")
    for name in RUNS:
        r = run(name)
        print(
            f"{name:33} {r['reclaims']:8d} {r['idle']:11.0f} {r['mean'] / 60:13.0f} m {r['p95'] / 60:6.0f} m "
            f"{r['wall']:5.1f}s  ({r['jobs']} jobs)"
        )
    r = rightsizing()
    slices = ", ".join(f"{n} x {s.removeprefix('nvidia.com/mig-')}" for s, n in sorted(r["slices"].items()))
    print(
        f"right-sizing (no reclaim, A100 slices offered): {r['fitting']} of {r['jobs']} jobs would fit a smaller slice "
        f"({r['idle']} of them idle; {slices}); {r['saved']:,.0f} of {r['hours']:,.0f} GPU-hours would have been "
        f"freed  ({r['wall']:.1f}s)"
    )
