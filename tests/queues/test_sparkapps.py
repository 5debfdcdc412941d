"""A SparkApplication's pod sets, read as Kueue reads them (its ``sparkapplication_podset.go``), and
what the webhook refuses (Kueue's rules), each at its field path."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from queues import errors
from queues.podsets import jobs, sparkapps

# Kueue's site/static/examples/jobs/sample-sparkapplication.yaml, as it is
KUEUE_SAMPLE: dict[str, Any] = {
    "apiVersion": "sparkoperator.k8s.io/v1beta2",
    "kind": "SparkApplication",
    "metadata": {"name": "spark-pi", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
    "spec": {
        "type": "Scala",
        "mode": "cluster",
        "sparkVersion": "4.0.0",
        "image": "spark:4.0.0",
        "imagePullPolicy": "IfNotPresent",
        "mainClass": "org.apache.spark.examples.SparkPi",
        "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
        "arguments": ["50000"],
        "memoryOverheadFactor": "0",
        "driver": {"coreRequest": "1", "memory": "1g", "serviceAccount": "spark"},
        "executor": {"instances": 2, "coreRequest": "1", "memory": "1g", "deleteOnTermination": False},
    },
}
GI = 1024**3 * 1000  # milli-units


def _app(**spec: Any) -> dict[str, Any]:
    app = copy.deepcopy(KUEUE_SAMPLE)
    app["spec"].update(spec)
    return app


def test_kueues_sample_is_a_driver_and_two_executors_charged_their_cores_and_memory() -> None:
    info = jobs.read_job(KUEUE_SAMPLE)
    assert info.queue_name == "user-queue"
    assert [(ps.name, ps.count, dict(ps.requests)) for ps in info.pod_sets] == [
        ("driver", 1, {"cpu": 1000, "memory": GI}),
        ("executor", 2, {"cpu": 1000, "memory": GI}),
    ]
    assert dict(info.template_paths) == {"driver": "/spec/driver", "executor": "/spec/executor"}


def test_gpus_limits_selectors_tolerations_sidecars_and_the_template_are_the_pods_own() -> None:
    app = _app(nodeSelector={"zone": "a"})
    app["spec"]["executor"].update(
        gpu={"name": "nvidia.com/gpu", "quantity": 2},
        memory="512m",
        coreLimit="2",
        nodeSelector={"pool": "gpu"},
        tolerations=[{"key": "spot", "operator": "Exists"}],
        sidecars=[{"name": "log", "image": "fluent", "resources": {"requests": {"cpu": "250m"}}}],
        template={"metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"}}},
        priorityClassName="batch",
    )
    app["spec"]["driver"]["template"] = {
        "spec": {
            "containers": [{"name": "spark-kubernetes-driver", "resources": {"limits": {"example.com/fpga": "1"}}}]
        }
    }
    driver, executor = jobs.read_job(app).pod_sets
    # (Turnstile charges what a role's template asks too: Kueue builds the pod from an empty one)
    assert dict(driver.requests) == {"cpu": 1000, "memory": GI, "example.com/fpga": 1000}
    assert dict(executor.requests) == {"cpu": 1250, "memory": 512 * 1024**2 * 1000, "nvidia.com/gpu": 2000}
    assert dict(executor.constraints.node_selector) == {"zone": "a", "pool": "gpu"}
    assert dict(driver.constraints.node_selector) == {"zone": "a"}  # the app-wide selector is every pod's
    assert [t.key for t in executor.tolerations] == ["spot"]
    assert executor.topology is not None and (executor.topology.mode, executor.topology.level) == ("required", "rack")
    pod = dict(jobs.pod_templates(app)[1][2])
    assert pod["metadata"]["labels"] == {sparkapps.ROLE_LABEL: "executor"}
    assert pod["spec"]["priorityClassName"] == "batch"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "2", "nvidia.com/gpu": "2"}


def test_no_executors_is_a_driver_alone() -> None:
    app = _app()
    del app["spec"]["executor"]["instances"]
    assert [(ps.name, ps.count) for ps in jobs.read_job(app).pod_sets] == [("driver", 1), ("executor", 0)]


@pytest.mark.parametrize(
    ("java", "kube"),
    [("512m", "512Mi"), ("2g", "2Gi"), ("1G", "1Gi"), ("3gb", "3Gi"), ("100k", "100Ki"), ("4Gi", "4Gi")],
)
def test_javas_memory_notation_is_a_kubernetes_quantity(java: str, kube: str) -> None:
    assert sparkapps.java_memory(java) == kube


def test_what_kueues_webhook_refuses_is_named_at_its_field() -> None:
    app = _app(mode="client", dynamicAllocation={"enabled": True})
    app["spec"]["driver"]["memory"] = "lots"
    app["spec"]["executor"]["instances"] = -1
    del app["spec"]["executor"]["coreRequest"]
    app["spec"]["executor"]["gpu"] = {"name": "nvidia.com/gpu", "quantity": "two"}
    with pytest.raises(errors.Invalid) as caught:
        jobs.read_job(app)
    fields = sorted(p.path for p in caught.value.errors)
    assert fields == [
        "spec.driver.memory",
        "spec.dynamicAllocation.enabled",
        "spec.executor.gpu.quantity",
        "spec.executor.instances",
        "spec.mode",
    ]
    app = _app()
    app["spec"]["executor"]["gpu"] = {"name": "nvidia.com/gpu", "quantity": "two"}
    del app["spec"]["driver"]
    with pytest.raises(errors.Invalid) as caught:
        jobs.read_job(app)
    assert sorted(p.path for p in caught.value.errors) == ["spec.driver", "spec.executor.gpu.quantity"]


def test_a_pod_of_an_app_is_known_by_the_operators_labels() -> None:
    labels = {**sparkapps.pod_labels("etl"), sparkapps.ROLE_LABEL: "executor"}
    assert sparkapps.is_app_pod(labels)
    assert not sparkapps.is_app_pod({**labels, sparkapps.LAUNCHED_LABEL: "false"})
    assert not sparkapps.is_app_pod({sparkapps.ROLE_LABEL: "executor"})
