"""The ProvisioningRequest check's scenarios in both engines: engine core's autoscaler model and
the real controller against the simulated cluster-autoscaler reach the same decisions (capacity
already there, scale-up after a delay, node limit -> retries -> deactivation, booking expiry)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from admission.sim import engine as cluster_engine
from queues.placement import nodes
from queues.simulation import scenario, simulator
from tests.e2e.test_engines import by_instant, decisions, time_scale
from tests.queues import test_provisioning as core


def scenarios() -> dict[str, dict[str, Any]]:
    booking = core._doc(
        jobs=[(0, "busy", 1, 1200), (10, "late", 1, 100)],  # busy holds node-0 past the retry
        checks=[{"name": "present", "class": nodes.CHECK_CAPACITY}, {"name": "scale", "class": nodes.ATOMIC_SCALE_UP}],
    )
    free_cq = copy.deepcopy(next(m for m in booking["manifests"] if m["kind"] == "ClusterQueue"))
    free_cq["metadata"]["name"] = "free"
    free_cq["spec"]["admissionChecks"] = []
    booking["manifests"] += [
        free_cq,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "free", "namespace": "ns"},
            "spec": {"clusterQueue": "free"},
        },
    ]
    booking["jobs"][0]["object"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "free"
    return {
        "capacity-there": core._doc(jobs=[(0, "fits", 1, 100)]),
        "scale-up": core._doc(jobs=[(0, "first", 1, 1000), (10, "second", 1, 100)]),
        "node-limit": core._doc(jobs=[(0, "giant", 4, 100)]),
        "booking-expiry": booking,
    }


@pytest.mark.wall_clock
async def test_both_engines_decide_the_same_on_the_admission_check_scenarios(server_url: str) -> None:
    parsed = {name: scenario.parse({**doc, "name": name}) for name, doc in scenarios().items()}
    runs = [cluster_engine.simulate(p, time_scale=time_scale(p), database_url=server_url) for p in parsed.values()]
    results = dict(zip(parsed, await asyncio.gather(*runs), strict=True))
    for name, p in parsed.items():
        core_run = simulator.Simulation(p).run().to_json("core")
        cluster = results[name].to_json("cluster")
        assert decisions(cluster["events"]), name
        assert len(decisions(cluster["events"])) == len(decisions(core_run["events"])), name
        expected, got = by_instant(core_run["events"], cluster["events"])
        assert got == expected, name
        states = {k: (w["state"], w.get("reason")) for k, w in cluster["workloads"].items()}
        assert states == {k: (w["state"], w.get("reason")) for k, w in core_run["workloads"].items()}, name
