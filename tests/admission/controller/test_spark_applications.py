"""A SparkApplication end to end on the simulated cluster: its directives written into its Spark pod
specs (the app-wide node selector moved into both, as Kueue does), its executors (owned by the
driver pod, carrying the app's queue label) never queued as plain pods, preempted and restored,
billed; and the patch that writes them, on its own."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from admission.jobs import BY_KIND
from admission.jobs.base import PodSetInfo
from admission.sim.server.patches import json_patch
from queues.podsets import jobs, sparkapps
from tests.admission.controller.world import CONFIG, JOBS, eventually, job, world

SPARK = BY_KIND[(sparkapps.API_VERSION, "SparkApplication")]
FLAVOR_TOLERATION = {"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}
APP: dict[str, Any] = {
    "apiVersion": sparkapps.API_VERSION,
    "kind": "SparkApplication",
    "metadata": {
        "name": "etl",
        "namespace": "ml",
        "labels": {jobs.QUEUE_LABEL: "team-a"},
        "annotations": {"turnstile.dev/sim-runtime": "30"},
    },
    "spec": {
        "suspend": True,  # (the webhook sets it; this world has none)
        "type": "Python",
        "mode": "cluster",
        "image": "spark:4.0.0",
        "mainApplicationFile": "local:///opt/etl.py",
        "nodeSelector": {"zone": "a"},
        "driver": {"labels": {"team": "data"}},  # (the world's ClusterQueue covers GPUs only)
        "executor": {
            "instances": 2,
            "gpu": {"name": "nvidia.com/gpu", "quantity": 2},
            "tolerations": [{"key": "spot", "operator": "Exists"}],
        },
    },
}


async def test_an_app_runs_on_its_flavor_its_executors_are_not_queued_and_it_gives_way(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1")
        await w.kube.create(SPARK.ref, "ml", APP)

        app = await eventually(lambda: w.started(SPARK.ref, "etl"), what="the SparkApplication admitted")
        assert "nodeSelector" not in app["spec"], "the app-wide selector is moved into both roles"
        # (the driver asks for nothing the ClusterQueue covers: it takes no flavor, as in Kueue)
        assert app["spec"]["driver"]["nodeSelector"] == {"zone": "a"}
        assert app["spec"]["executor"]["nodeSelector"] == {"zone": "a", "gpu": "a100"}
        assert app["spec"]["executor"]["tolerations"] == [{"key": "spot", "operator": "Exists"}, FLAVOR_TOLERATION]
        assert all(app["spec"][r]["annotations"]["turnstile.dev/workload"] == "ml/etl" for r in ("driver", "executor"))

        async def pods() -> list[dict[str, Any]]:
            listed = await w.kube.request("GET", "/api/v1/namespaces/ml/pods")
            return [p for p in listed["items"] if p["metadata"]["labels"].get(sparkapps.APP_NAME_LABEL) == "etl"]

        async def three() -> list[dict[str, Any]] | None:
            found = await pods()
            return found if len(found) == 3 else None

        made = await eventually(three, what="the driver and two executors")
        executors = [p for p in made if p["metadata"]["labels"][sparkapps.ROLE_LABEL] == "executor"]
        assert len(executors) == 2 and all(p["metadata"]["ownerReferences"][0]["kind"] == "Pod" for p in executors)
        for pod in made:
            assert pod["metadata"]["labels"][jobs.QUEUE_LABEL] == "team-a"  # (the operator copies the app's labels)
            assert "kueue.x-k8s.io/managed" not in pod["metadata"]["labels"], "a Spark pod is not a plain pod"
            assert not pod["spec"].get("schedulingGates")
            on_flavor = pod["metadata"]["labels"][sparkapps.ROLE_LABEL] == "executor"
            assert pod["spec"]["nodeSelector"] == ({"zone": "a", "gpu": "a100"} if on_flavor else {"zone": "a"})

        await w.create(job("urgent", gpus=8, priority="high"))

        async def given_way() -> dict[str, Any] | None:
            current = await w.kube.get(SPARK.ref, "ml", "etl")
            restored = current["spec"]["executor"].get("nodeSelector") == {"zone": "a"}
            # (the operator says SUSPENDED once its pods are gone, a moment after the last one goes)
            stopped = current["status"]["applicationState"]["state"] == "SUSPENDED" and not await pods()
            return current if SPARK.is_suspended(current) and restored and stopped else None

        app = await eventually(given_way, timeout=15, what="the app suspended, its own directives back, pods gone")
        assert app["spec"]["executor"]["tolerations"] == [{"key": "spot", "operator": "Exists"}]
        await w.kube.delete(JOBS, "ml", "urgent")
        await eventually(lambda: w.started(SPARK.ref, "etl"), timeout=15, what="the app admitted again")
        assert await w.billed("etl") == ("SparkApplication", [("nvidia.com/gpu", 4000)] * 2)


def test_a_new_app_carries_its_own_directives_and_a_run_moves_the_app_wide_selector() -> None:
    """Unadmitted, the app needs no restore (the app-wide selector counts as each role's); the run's
    patch writes both roles and removes the app-wide one, after which the app carries the run's."""
    app = copy.deepcopy(APP)
    app["metadata"]["uid"] = "u1"
    app["spec"]["suspend"] = True
    view = SPARK.view(app)
    assert view.info is not None
    own = [PodSetInfo(ps.name, dict(ps.constraints.node_selector), [t.to_dict() for t in ps.tolerations])
           for ps in view.info.pod_sets]  # fmt: skip
    assert view.carries(own)  # (so the enactor writes no restore to it)
    run = [PodSetInfo(i.name, {**i.node_selector, "gpu": "a100"}, [*i.tolerations, FLAVOR_TOLERATION]) for i in own]
    ops = SPARK.patch(view, suspend=False, infos=run, admission="a1")
    assert {"op": "remove", "path": "/spec/nodeSelector"} in ops
    assert {"op": "add", "path": "/spec/driver/nodeSelector", "value": {"zone": "a", "gpu": "a100"}} in ops
    applied = json_patch(json.loads(json.dumps(app)), ops)  # (as the API server applies it)
    after = SPARK.view(applied)
    assert after.carries(run) and not after.suspended
    assert not SPARK.pins_pods  # (no pod template to gate: placed by topology, its pods are not pinned)
