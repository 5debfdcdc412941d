"""The webhook over real HTTPS: its answers for jobs, and fuzzing (hypothesis) with random,
malformed, huge and deeply nested AdmissionReviews: never a crash, never a 5xx."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.webhook import certs, review
from admission.webhook.server import MAX_BODY, WebhookServer
from queues.kueue import codec
from queues.model import Config

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: research}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohort: research
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: "64"}
      - {name: nvidia.com/gpu, nominalQuota: "8", borrowingLimit: "4"}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-b}
spec:
  cohort: research
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: "64"}
      - {name: nvidia.com/gpu, nominalQuota: "8"}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: default, namespace: research}
spec: {clusterQueue: team-b}
"""


class Server:
    """The webhook on TLS in a thread of its own, so plain blocking clients (and hypothesis) can call it."""

    def __init__(self, folder: Path, *, missing_queue: str = "hold") -> None:
        self.bundle = certs.issue(folder, ["127.0.0.1"])
        self.config: Config | None = Config.of([codec.parse(d) for d in yaml.safe_load_all(CONFIG)])
        self.loop = asyncio.new_event_loop()
        self.port = 0
        started = threading.Event()

        async def start() -> None:
            self.runner = web.AppRunner(WebhookServer(lambda: self.config, missing_queue=missing_queue).app)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=self.bundle.server_context(folder))
            await site.start()
            self.port = self.runner.addresses[0][1]
            started.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(start(), self.loop)
        assert started.wait(10)
        self.tls = ssl.create_default_context(cadata=self.bundle.ca_crt.decode())

    def post(self, path: str, body: bytes) -> tuple[int, Any]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.tls, timeout=30)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        try:
            return response.status, json.loads(data)
        except ValueError:
            return response.status, data

    def review(self, path: str, obj: dict[str, Any] | None, operation: str = "CREATE", namespace: str = "ml") -> Any:
        request = {"uid": "u-1", "operation": operation, "namespace": namespace, "object": obj}
        status, body = self.post(path, json.dumps({"apiVersion": "admission.k8s.io/v1", "request": request}).encode())
        assert status == 200, body
        return body["response"]

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("webhook"))
    yield s
    s.stop()


def job(name: str, queue: str | None = "team-a", gpus: str = "1", cpu: str | None = "4") -> dict[str, Any]:
    requests = {"nvidia.com/gpu": gpus, **({"cpu": cpu} if cpu else {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue} if queue else {}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "train", "image": "x", "resources": {"requests": requests}}],
                }
            }
        },
    }


def patch_of(response: Any) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else []


def test_a_queued_job_is_suspended_and_a_default_queue_is_labelled(server: Server) -> None:
    assert {"op": "add", "path": "/spec/suspend", "value": True} in patch_of(server.review("/mutate", job("a")))
    ops = patch_of(server.review("/mutate", job("b", queue=None), namespace="research"))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops
    assert any("queue-name" in json.dumps(op) and "default" in json.dumps(op) for op in ops)
    # no queue and no default queue, in a namespace with LocalQueues (managed by default): a GPU job is held,
    # with the fix; one asking for no managed resource (no GPU) is untouched, and elsewhere nothing is
    held = server.review("/mutate", job("c", queue=None))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in patch_of(held)
    assert "add label kueue.x-k8s.io/queue-name with one of: team-a" in " ".join(held["warnings"])
    assert patch_of(server.review("/mutate", job("d", queue=None, gpus="0"))) == []
    assert patch_of(server.review("/mutate", job("e", queue=None), namespace="elsewhere")) == []


def test_an_unknown_queue_holds_the_job_with_a_warning_naming_the_ones_that_exist(server: Server) -> None:
    """Kueue's behaviour, the default: GitOps tools apply a job and its LocalQueue in any order."""
    response = server.review("/validate", job("a", queue="team-z"))
    assert response["allowed"] is True
    (warning,) = [w for w in response["warnings"] if "team-z" in w]
    assert "LocalQueues in ml: team-a" in warning and "LocalQueueNotFound" in warning
    assert {"op": "add", "path": "/spec/suspend", "value": True} in patch_of(
        server.review("/mutate", job("a", "team-z"))
    )


def test_an_unknown_queue_is_refused_when_the_install_says_so(tmp_path: Path) -> None:
    strict = Server(tmp_path, missing_queue="refuse")  # TURNSTILE_MISSING_LOCAL_QUEUE=refuse
    try:
        response = strict.review("/validate", job("a", queue="team-z"))
        assert response["allowed"] is False
        message = response["status"]["message"]
        assert "team-z" in message and "LocalQueues in ml: team-a" in message and "metadata.labels" in message
        assert strict.review("/validate", job("b"))["allowed"] is True
    finally:
        strict.stop()


def test_a_job_that_can_never_fit_is_admitted_with_a_warning(server: Server) -> None:
    # team-a: 8 GPUs nominal, may borrow 4 from its cohort: 12 fits when all is free, 13 never does.
    assert not [w for w in server.review("/validate", job("fits", gpus="12")).get("warnings", []) if "never" in w]
    response = server.review("/validate", job("huge", gpus="13"))
    assert response["allowed"] is True
    (warning,) = [w for w in response["warnings"] if "never" in w]
    assert "ClusterQueue team-a" in warning and "nvidia.com/gpu" in warning
    # A resource the queue does not provide can never fit either.
    response = server.review(
        "/validate",
        {
            **job("tpu"),
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"google.com/tpu": "1"}}}]}
                }
            },
        },
    )
    assert any("never" in w and "google.com/tpu" in w for w in response["warnings"])


@pytest.mark.parametrize(("minimum", "never"), [("5", False), ("13", True)], ids=["fits-partially", "never"])
def test_a_job_that_may_run_partially_is_told_never_only_if_its_minimum_never_fits(
    server: Server, minimum: str, never: bool
) -> None:
    """Kueue's sample-job-partial-admission: larger than its queue whole (20 GPUs on 8 + 4), but it
    may start with its job-min-parallelism."""
    body = job("sweep", gpus="1")
    body["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": minimum}
    body["spec"].update(parallelism=20, completions=20)
    warnings = server.review("/validate", body).get("warnings", [])
    assert any("can never be admitted" in w for w in warnings) == never, warnings


def test_gpu_containers_without_cpu_or_memory_get_a_warning(server: Server) -> None:
    warnings = server.review("/validate", job("a", cpu=None)).get("warnings", [])
    assert any("no cpu or memory" in w for w in warnings)


def test_topology_annotations_are_accepted_without_a_warning(server: Server) -> None:
    annotated = job("tas")
    annotated["spec"]["template"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/topology-rack"}
    }
    review = server.review("/validate", annotated)
    assert review["allowed"] is True, review
    assert not any("not used" in w for w in review.get("warnings", [])), review
    # (its ClusterQueue's flavor has no topologyName: that, it is told)
    assert any("has no topologyName; the pod set asks for a topology" in w for w in review["warnings"]), review


def test_limits_stand_for_requests(server: Server) -> None:
    """A container with only limits has requests (Kubernetes defaults them from the limits)."""
    only_limits = job("limited", cpu=None)
    resources = only_limits["spec"]["template"]["spec"]["containers"][0]["resources"]
    resources["limits"] = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    warnings = server.review("/validate", only_limits).get("warnings", [])
    assert not any("no cpu or memory" in w for w in warnings), warnings


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        ("-1", "must not be negative"),
        ("abc", "'abc' is not a quantity"),
        ("1e40", "too large"),
        ("0.5", "must be a whole number"),
    ],
    ids=["negative", "not-a-quantity", "beyond-int64", "fractional-gpu"],
)
def test_a_queued_job_turnstile_cannot_read_is_refused_with_the_field_path(
    server: Server, gpus: str, expected: str
) -> None:
    bad = job("unreadable")
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": gpus}
    response = server.review("/validate", bad)
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu" in message and expected in message, (
        message
    )
    # a job Turnstile does not queue is the API server's business, not the webhook's
    assert server.review("/validate", {**bad, "metadata": {"name": "free", "labels": {}}})["allowed"] is True


def test_the_review_kind_decides_the_integration_not_the_objects_typemeta(server: Server) -> None:
    """A real API server names the kind in request.kind; the object's own TypeMeta is not relied on."""
    obj = job("typeless")
    del obj["apiVersion"], obj["kind"]
    request = {
        "uid": "u-2",
        "operation": "CREATE",
        "namespace": "ml",
        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "object": obj,
    }
    status, body = server.post(
        "/mutate", json.dumps({"apiVersion": "admission.k8s.io/v1", "request": request}).encode()
    )
    assert status == 200 and {"op": "add", "path": "/spec/suspend", "value": True} in patch_of(body["response"])


def test_malformed_oversized_and_delete(server: Server) -> None:
    assert server.post("/validate", b"{not json")[0] == 400
    assert server.post("/validate", b'{"request": {}}')[0] == 400
    assert server.post("/validate", b"[" * 100_000 + b"]" * 100_000)[0] == 400  # deeper than any parser's stack
    status, body = server.post("/validate", b'{"a": "' + b"x" * (MAX_BODY + 10) + b'"}')
    assert status == 413 and body["kind"] == "Status"
    response = server.review("/validate", None, operation="DELETE")
    assert response["allowed"] is True
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    assert server.review("/mutate", other) == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_a_job_the_webhook_cannot_review_is_refused_never_allowed_unchanged(server: Server, path: str) -> None:
    """Fail closed: an internal error (here labels that are not a map) denies the job with its name;
    an allowed, unsuspended queued job would run outside its quota."""
    broken = job("broken")
    broken["metadata"]["labels"] = ["kueue.x-k8s.io/queue-name", "team-a"]
    response = server.review(path, broken)
    assert response["allowed"] is False, response
    assert "patch" not in response
    assert response["status"]["message"].startswith("Job ml/broken: Turnstile could not review it"), response


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30,
)
KINDS = st.sampled_from(
    [("batch/v1", "Job"), ("kubeflow.org/v1", "PyTorchJob"), ("kubeflow.org/v2beta1", "MPIJob"), ("v1", "Pod")]
)


@st.composite
def reviews(draw: st.DrawFn) -> bytes:
    """AdmissionReviews from well-formed to broken: job-shaped objects with random parts."""
    api_version, kind = draw(KINDS)
    obj: Any = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": st.text(max_size=10) | JSON,
                    "labels": st.dictionaries(st.sampled_from(["kueue.x-k8s.io/queue-name", "a"]), JSON, max_size=2),
                },
            )
        ),
        "spec": draw(JSON | st.fixed_dictionaries({"template": st.fixed_dictionaries({"spec": JSON})})),
    }
    if draw(st.booleans()):
        obj = draw(JSON)
    request: Any = {
        "uid": draw(st.text(max_size=8) | JSON),
        "operation": draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", ""]) | JSON),
        "namespace": draw(st.sampled_from(["ml", "research", ""]) | JSON),
        "object": obj,
        "oldObject": draw(st.none() | JSON),
    }
    body: Any = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    if draw(st.integers(0, 9)) == 0:
        body = draw(JSON)
    return json.dumps(body).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=reviews())
def test_fuzzed_reviews_never_crash_the_server(server: Server, body: bytes) -> None:
    status, answer = server.post(f"/{'mutate' if len(body) % 2 else 'validate'}", body)
    assert status in (200, 400), (status, answer)
    if status == 200:
        assert set(answer["response"]) <= {"uid", "allowed", "status", "patch", "patchType", "warnings"}


def test_an_unreadable_keep_until_is_warned_about(server: Server) -> None:
    kept = job("kept")
    kept["metadata"].setdefault("annotations", {})["turnstile.dev/keep-until"] = "tomorrow"
    warnings = server.review("/validate", kept).get("warnings", [])
    assert any("turnstile.dev/keep-until]: 'tomorrow' is not an RFC 3339 time" in w for w in warnings), warnings
    kept["metadata"]["annotations"]["turnstile.dev/keep-until"] = "2026-12-24T18:00:00Z"
    assert not any("keep-until" in w for w in server.review("/validate", kept).get("warnings", []))


def test_an_elastic_job_is_gated_and_kinds_not_elastic_here_are_warned_about(server: Server) -> None:
    """Kueue's elastic-job annotation on a batch Job: its pod template gets Kueue's elastic-job
    scheduling gate (its pods start only as far as its admission goes); with partial admission it
    is refused as Kueue refuses it. On a kind Turnstile does not resize, the person is told so."""
    elastic = job("elastic")
    elastic["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/elastic-job"] = "true"
    review = server.review("/validate", elastic)
    assert review["allowed"] is True and not [w for w in review.get("warnings", []) if "elastic" in w], review
    gate = {
        "op": "add",
        "path": "/spec/template/spec/schedulingGates",
        "value": [{"name": "kueue.x-k8s.io/elastic-job"}],
    }
    assert gate in patch_of(server.review("/mutate", elastic))
    assert not any("schedulingGates" in op["path"] for op in patch_of(server.review("/mutate", job("plain"))))
    elastic["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/mine"}]
    ops = [op for op in patch_of(server.review("/mutate", elastic)) if "schedulingGates" in op["path"]]
    assert ops == [
        {"op": "add", "path": "/spec/template/spec/schedulingGates/-", "value": {"name": "kueue.x-k8s.io/elastic-job"}}
    ]
    elastic["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] = "1"
    refused = server.review("/validate", elastic)
    assert refused["allowed"] is False
    assert (
        "partial admission and elastic job (kueue.x-k8s.io/elastic-job) cannot be used together"
        in refused["status"]["message"]
    )
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
                     "annotations": {"kueue.x-k8s.io/elastic-job": "true"}},
        "spec": {
            "enableInTreeAutoscaling": True,
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "x"}]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1,
                                  "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}}}],
        },
    }  # fmt: skip
    review = server.review("/validate", cluster)
    assert review["allowed"] is True and not [w for w in review.get("warnings", []) if "elastic" in w], review
    gated = {op["path"] for op in patch_of(server.review("/mutate", cluster)) if "schedulingGates" in op["path"]}
    assert gated == {"/spec/headGroupSpec/template/spec/schedulingGates",
                     "/spec/workerGroupSpecs/0/template/spec/schedulingGates"}  # fmt: skip
    del cluster["metadata"]["annotations"]
    refused = server.review("/validate", cluster)
    assert refused["allowed"] is False and "spec.enableInTreeAutoscaling" in refused["status"]["message"]
    assert "can autoscale only as an elastic job" in refused["status"]["message"]
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
                     "annotations": {"kueue.x-k8s.io/elastic-job": "true"}},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}}},
    }  # fmt: skip
    review = server.review("/validate", pytorch)
    assert any("are a batch Job's or a Ray kind's only here (not a PyTorchJob's)" in w
               for w in review.get("warnings", [])), review  # fmt: skip
    service = {**cluster, "kind": "RayService", "metadata": {**cluster["metadata"], "name": "svc"},
               "spec": {"rayClusterConfig": cluster["spec"]}}  # fmt: skip
    assert "spec.rayClusterConfig.enableInTreeAutoscaling" in server.review("/validate", service)["status"]["message"]
    service["metadata"]["annotations"] = {"kueue.x-k8s.io/elastic-job": "true"}
    review = server.review("/validate", service)
    assert review["allowed"] is True and not [w for w in review.get("warnings", []) if "elastic" in w], review
    gated = {op["path"] for op in patch_of(server.review("/mutate", service)) if "schedulingGates" in op["path"]}
    assert gated == {"/spec/rayClusterConfig/headGroupSpec/template/spec/schedulingGates",
                     "/spec/rayClusterConfig/workerGroupSpecs/0/template/spec/schedulingGates"}  # fmt: skip
    # a RayJob: its cluster's templates (KubeRay copies them into the cluster), never its submitter's
    submitter = {"spec": {"restartPolicy": "Never", "containers": [{"name": "s", "image": "x"}]}}
    rayjob = {**service, "kind": "RayJob", "metadata": {**service["metadata"], "name": "rj"},
              "spec": {"shutdownAfterJobFinishes": True, "rayClusterSpec": cluster["spec"],
                       "submitterPodTemplate": submitter}}  # fmt: skip
    review = server.review("/validate", rayjob)
    assert review["allowed"] is True, review
    gated = {op["path"] for op in patch_of(server.review("/mutate", rayjob)) if "schedulingGates" in op["path"]}
    assert gated == {"/spec/rayClusterSpec/headGroupSpec/template/spec/schedulingGates",
                     "/spec/rayClusterSpec/workerGroupSpecs/0/template/spec/schedulingGates"}  # fmt: skip
    assert not any("elastic" in w for w in server.review("/validate", job("plain")).get("warnings", []))


def test_a_job_whose_dra_claims_cannot_be_charged_is_created_with_a_warning(server: Server) -> None:
    """Never a claim uncounted (docs/dra.md): the job is created and waits Misconfigured, and the
    person creating it is told why, naming the pod set, the claim and the DeviceClass."""
    from queues.dra import charges, mappings

    body = job("claims", gpus="0")
    body["metadata"]["namespace"] = "ml"
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "mig"}]
    mig = charges.ClaimTemplate("ml", "mig", (charges.DeviceRequest("mig", "mig.nvidia.com"),))
    unmapped = charges.Devices.of(mappings.NONE, [mig])
    answer = review.validate("CREATE", body, None, "ml", server.config, devices=unmapped)
    assert answer.allowed
    (warning,) = [w for w in answer.warnings if "Misconfigured" in w]
    assert "pod set main" in warning and "DeviceClass mig.nvidia.com is not mapped" in warning
    mapped = charges.Devices.of(mappings.parse([{"name": "mig-1g", "deviceClassNames": ["mig.nvidia.com"]}]), [mig])
    answer = review.validate("CREATE", body, None, "ml", server.config, devices=mapped)
    assert answer.allowed and not [w for w in answer.warnings if "Misconfigured" in w]


def test_a_prioritized_list_is_created_with_what_it_is_charged(server: Server) -> None:
    """``firstAvailable`` is charged its largest alternative (docs/dra.md): the person creating the
    job is told so, with the charge; a job without one is not."""
    from queues.dra import charges, mappings

    body = job("either", gpus="0")
    body["metadata"]["namespace"] = "ml"
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "either"}]
    alternatives = (
        charges.DeviceRequest("gpus/one", "gpu.nvidia.com"),
        charges.DeviceRequest("gpus/two", "gpu.nvidia.com", count=2),
    )
    either = charges.ClaimTemplate("ml", "either", (charges.DeviceRequest("gpus", None, alternatives=alternatives),))
    mapped = mappings.parse([{"name": "whole-gpus", "deviceClassNames": ["gpu.nvidia.com"]}])
    answer = review.validate("CREATE", body, None, "ml", server.config, devices=charges.Devices.of(mapped, [either]))
    assert answer.allowed
    (warning,) = [w for w in answer.warnings if "firstAvailable" in w]
    assert warning.startswith("pod set main, claim gpus, request gpus: a prioritized list (firstAvailable)")
    assert warning.endswith("the pod set's claims are charged up to whole-gpus 2 per pod")
    plain = charges.ClaimTemplate("ml", "either", (charges.DeviceRequest("gpus", "gpu.nvidia.com"),))
    answer = review.validate("CREATE", body, None, "ml", server.config, devices=charges.Devices.of(mapped, [plain]))
    assert not [w for w in answer.warnings if "firstAvailable" in w]


def test_a_job_claiming_more_devices_than_its_queue_can_ever_hold_is_warned(server: Server) -> None:
    from queues.dra import charges, mappings

    body = job("greedy", gpus="0")
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "many"}]
    many = charges.ClaimTemplate("ml", "many", (charges.DeviceRequest("gpus", "gpu.nvidia.com", count=1000),))
    devices = charges.Devices.of(
        mappings.parse([{"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]}]), [many]
    )
    answer = review.validate("CREATE", body, None, "ml", server.config, devices=devices)
    assert any("can never be admitted" in w for w in answer.warnings), answer.warnings
    few = charges.Devices.of(
        devices.mappings, [charges.ClaimTemplate("ml", "many", (charges.DeviceRequest("gpus", "gpu.nvidia.com"),))]
    )
    answer = review.validate("CREATE", body, None, "ml", server.config, devices=few)
    assert not any("can never be admitted" in w for w in answer.warnings), answer.warnings


def test_a_resource_the_queue_does_not_cover_is_not_told_never_when_undeclared_resources_are_ignored() -> None:
    """Kueue's quotaCheckStrategy IgnoreUndeclared: a TPU request the queue does not cover is left out
    of the quota check, so the job fits; by default it can never be admitted, and is told so."""
    from queues.dra import charges
    from queues.podsets import transformations

    config = Config.of([codec.parse(d) for d in yaml.safe_load_all(CONFIG)])
    body = job("tpu")
    body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["google.com/tpu"] = "1"
    ignoring = charges.Devices(transformations=transformations.parse(None, None, "IgnoreUndeclared"))
    assert review._never_fits(body, "ml", "team-a", config, devices=ignoring) == []
    (warning,) = review._never_fits(body, "ml", "team-a", config, devices=charges.Devices())
    assert "google.com/tpu" in warning and "IgnoreUndeclared" in warning


def test_a_jobs_own_pods_ready_timeout_must_be_a_duration(server: Server) -> None:
    """KEP-4803's ``kueue.x-k8s.io/pods-ready-timeout``: read (no warning that it is not), and a value
    that is not a duration is refused at creation naming the annotation."""
    own = job("own")
    own["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/pods-ready-timeout"] = "15m"
    review = server.review("/validate", own)
    assert review["allowed"] is True and not [w for w in review.get("warnings", []) if "pods-ready" in w], review
    own["metadata"]["annotations"]["kueue.x-k8s.io/pods-ready-timeout"] = "a while"
    refused = server.review("/validate", own)
    assert refused["allowed"] is False
    assert "metadata.annotations[kueue.x-k8s.io/pods-ready-timeout]: must be a duration" in refused["status"]["message"]
