"""Every GPU pod goes through the queue: plain Pods, pod groups and Deployments, as a user meets them.

kubectl against the simulated cluster (which runs Pods, ReplicaSets and Deployments as a real one
does, and calls the webhook as a real API server), a controller replica with its webhook over TLS,
PostgreSQL behind it. Nothing here knows Turnstile's internals: pods are read back from the cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from admission.jobs import INTEGRATIONS
from admission.kube.client import Kube
from admission.sim.host import SimHost
from admission.sim.operators.replicas import PODS
from admission.sim.server import resources
from admission.webhook import configurations
from tests.admission.controller.world import eventually
from tests.admission.runner import KUBECTL, kubectl, turnstile
from tests.e2e.test_install import free_port, installed, replica

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")

GATE = "kueue.x-k8s.io/admission"
EVENTS = next(r for r in resources.BUILT_IN if r.plural == "events" and not r.group)
CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {gpu: a100}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: cpu, nominalQuota: "64"}, {name: nvidia.com/gpu, nominalQuota: "2"}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
"""


@contextlib.asynccontextmanager
async def configured(tmp_path: Path, url: str) -> AsyncIterator[tuple[SimHost, Kube, int]]:
    """The cluster with Turnstile's webhooks registered for a replica at the port it yields."""
    port = free_port()
    async with installed(tmp_path, url, config=CONFIG) as (host, kube, _engine):
        for config in configurations.configurations(
            {"url": f"https://127.0.0.1:{port}"}, None, integrations=INTEGRATIONS
        ):
            await kube.request("POST", f"/apis/admissionregistration.k8s.io/v1/{config['kind'].lower()}s", body=config)
        yield host, kube, port


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, url: str) -> AsyncIterator[tuple[SimHost, Kube]]:
    async with (
        configured(tmp_path, url) as (host, kube, port),
        replica(host, url, tmp_path / "certs", port, cert_secret=None),
    ):
        yield host, kube


def pod(
    name: str, *, gpus: int = 1, queue: str | None = "team-a", runtime: str | None = None, **extra: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "labels": {}, "annotations": {}}
    if queue:
        meta["labels"]["kueue.x-k8s.io/queue-name"] = queue
    if runtime:
        meta["annotations"]["turnstile.dev/sim-runtime"] = runtime
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.6.0",
        "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": str(gpus)}},
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **extra}}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


async def create(host: SimHost, obj: dict[str, Any]) -> tuple[int, str, str]:
    return await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(obj))


def live(host: SimHost, prefix: str = "") -> dict[str, dict[str, Any]]:
    pods = host.server.store.list(PODS, "ml")[0]
    return {
        p["metadata"]["name"]: p
        for p in pods
        if p["metadata"]["name"].startswith(prefix) and not p["metadata"].get("deletionTimestamp")
    }


def running(host: SimHost, prefix: str = "") -> set[str]:
    return {n for n, p in live(host, prefix).items() if p["status"].get("phase") == "Running"}


def gated(host: SimHost, prefix: str = "") -> set[str]:
    return {
        n for n, p in live(host, prefix).items() if GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []]
    }


async def test_plain_pods_wait_gated_for_quota_and_run_on_their_flavor(tmp_path: Path, migrated_url: str) -> None:
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        for name in ("a", "b"):
            code, _, err = await create(host, pod(name, runtime="2" if name == "a" else None))
            assert code == 0, err
        await eventually(lambda: running(host) == {"a", "b"}, what="two 1-GPU pods admitted and running")
        started = live(host)["a"]
        assert started["spec"]["nodeSelector"] == {"gpu": "a100"}  # the flavor's node labels, added at ungating
        assert started["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
        assert "turnstile.dev/admission" in started["metadata"]["annotations"]
        code, _, err = await create(host, pod("c"))
        assert code == 0, err
        await eventually(lambda: "c" in gated(host), what="the third pod held by the gate")
        assert "nodeName" not in live(host)["c"]["spec"]  # never scheduled while gated
        # a finishes: its quota is released and c starts
        await eventually(lambda: running(host) == {"b", "c"}, what="c admitted once a finished", timeout=20)
        # removing the gate by hand is refused: it would run the pod outside quota
        code, _, err = await create(host, pod("d"))
        assert code == 0, err
        await eventually(lambda: "d" in gated(host), what="d held")
        code, _, err = await kubectl(
            host.kubeconfig, "patch", "pod", "d", "-n", "ml", "--type=json", "-p",
            json.dumps([{"op": "remove", "path": "/spec/schedulingGates/0"}]),
        )  # fmt: skip
        assert code != 0 and "removing it by hand would run the pod outside quota" in err
        # the pods' GPU time is on the ledger, billed to their namespace and flavor
        ran = turnstile(
            "usage", "--by", "namespace", "-o", "json", env={**os.environ, "TURNSTILE_DATABASE_URL": migrated_url}
        )
        assert ran.returncode == 0, ran.stderr
        gpu = [r for r in json.loads(ran.stdout)["rows"] if r["resource"] == "nvidia.com/gpu"]
        assert [(r["group"], r["clusterQueue"], r["flavor"]) for r in gpu] == [("ml", "team-a", "a100")]
        assert gpu[0]["hours"] > 0


async def _workload(host: SimHost, prefix: str) -> dict[str, Any] | None:
    code, out, err = await kubectl(host.kubeconfig, "get", "workloads", "-n", "ml", "-o", "json")
    assert code == 0, err
    return next((o for o in json.loads(out)["items"] if o["metadata"]["name"].startswith(prefix)), None)


async def test_a_pod_group_is_admitted_whole_and_bad_groups_are_refused(tmp_path: Path, migrated_url: str) -> None:
    async with cluster(tmp_path, migrated_url) as (host, _kube):

        def member(name: str, total: str = "2", group: str = "ring") -> dict[str, Any]:
            obj = pod(name)
            obj["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = group
            obj["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = total
            return obj

        assert (await create(host, member("ring-0")))[0] == 0
        await eventually(lambda: "ring-0" in gated(host), what="the first pod of the group held")
        code, _, err = await create(host, member("ring-x", total="3"))
        assert code != 0 and "disagrees with the pods of group ring" in err, err
        code, _, err = await create(host, member("ring-y", total="two"))
        assert code != 0 and "must be a whole number >= 1" in err, err
        assert (await create(host, member("ring-1")))[0] == 0
        await eventually(lambda: running(host, "ring-") == {"ring-0", "ring-1"}, what="the whole group admitted")

        # its Workload object (kubectl get workloads): labelled with a label value (a pod group's job
        # uid has a ':', the real server refuses it), owned by the group's pods as Kueue's
        async def with_status() -> dict[str, Any] | None:  # (the object is made, then its status written)
            found = await _workload(host, "pod-ring-")
            return found if found is not None and (found.get("status") or {}).get("conditions") else None

        workload = await eventually(with_status, what="the group's Workload object and its status")
        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(host, "ring-").values()}
        assert workload["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == f"podgroup.{uids['ring-0']}"
        owners = {(o["kind"], o["name"], o["uid"]) for o in workload["metadata"]["ownerReferences"]}
        assert owners == {("Pod", name, uid) for name, uid in uids.items()}
        assert [c["status"] for c in workload["status"]["conditions"] if c["type"] == "Admitted"] == ["True"]
        # a group that cannot fit waits whole: no pod of it starts
        for name in ("big-0", "big-1"):
            assert (await create(host, member(name, group="big")))[0] == 0
        await eventually(lambda: gated(host, "big-") == {"big-0", "big-1"}, what="the second group waits whole")
        # Turnstile's gate added by hand to a pod it does not queue would hold it forever: refused
        code, _, err = await create(host, pod("sneaky", queue=None, gpus=0, schedulingGates=[{"name": GATE}]))
        assert code != 0 and "is Turnstile's gate" in err, err


async def test_a_deployment_scales_through_the_queue_and_unlabelled_gpu_pods_are_held(
    tmp_path: Path, migrated_url: str
) -> None:
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "vllm", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "vllm"}},
                "template": {"metadata": {"labels": {"app": "vllm"}}, "spec": pod("x")["spec"]},
            },
        }
        code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(deployment))
        assert code == 0, err
        await eventually(
            lambda: len(running(host, "vllm-")) == 2 and len(gated(host, "vllm-")) == 1,
            what="two replicas admitted within the 2-GPU quota, the third waiting gated",
        )
        assert (await kubectl(host.kubeconfig, "scale", "deployment", "vllm", "-n", "ml", "--replicas=1"))[0] == 0
        await eventually(
            lambda: len(running(host, "vllm-")) == 1 and not gated(host, "vllm-"),
            what="scale-in removes the waiting replica first, then a running one",
        )
        # the freed quota goes to whoever waits: an unlabelled GPU pod does not, it is held with the fix
        code, _, err = await create(host, pod("rogue", queue=None))
        assert code == 0, err
        assert (
            "without label kueue.x-k8s.io/queue-name" in err
            and "add label kueue.x-k8s.io/queue-name with one of: team-a" in err
        )
        await eventually(lambda: "rogue" in gated(host), what="the unlabelled GPU pod held")
        await eventually(
            lambda: any(
                e.get("reason") == "QueueNameMissing"
                and e["involvedObject"]["name"] == "rogue"
                and "team-a" in e["message"]
                for e in host.server.store.list(EVENTS, "ml")[0]
            ),
            what="a QueueNameMissing Event on the held pod, naming the LocalQueue to use",
        )
        # ... and a CPU-only pod without a queue runs as before
        code, _, err = await create(host, pod("debug", queue=None, gpus=0))
        assert code == 0, err
        await eventually(lambda: "debug" in running(host), what="a CPU-only pod unaffected")
        assert (await kubectl(host.kubeconfig, "scale", "deployment", "vllm", "-n", "ml", "--replicas=2"))[0] == 0
        await eventually(lambda: len(running(host, "vllm-")) == 2, what="scale-out admitted into the free quota")
        assert "rogue" in gated(host)


async def test_priority_classes_preempt_pods_and_a_statefulset_is_admitted_whole(
    tmp_path: Path, migrated_url: str
) -> None:
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        assert (await create(host, priority_class("inference", 100)))[0] == 0
        for name in ("batch-1", "batch-2"):
            assert (await create(host, pod(name)))[0] == 0
        await eventually(lambda: running(host, "batch-") == {"batch-1", "batch-2"}, what="batch pods fill the quota")
        # Kubernetes' priorityClassName is the pod's priority (no WorkloadPriorityClass named): it preempts
        code, _, err = await create(host, pod("serve", priorityClassName="inference"))
        assert code == 0, err
        await eventually(lambda: "serve" in running(host), what="the higher-priority pod admitted", timeout=20)
        assert len(running(host, "batch-")) == 1  # one batch pod was deleted to make room (pods cannot suspend)
        # a StatefulSet is one pod group: its pods are created one by one (OrderedReady) and admitted whole
        sts = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": "db",
                "namespace": "ml",
                "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
                "annotations": {"turnstile.dev/min-replicas": "2"},
            },
            "spec": {
                "replicas": 2,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": pod("x")["spec"]},
            },
        }
        code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(sts))
        assert code == 0, err
        await eventually(lambda: gated(host, "db-") == {"db-0"}, what="the first pod of the StatefulSet waits")
        first = live(host, "db-")["db-0"]["metadata"]
        assert first["labels"]["kueue.x-k8s.io/pod-group-name"] == "statefulset-db"
        assert first["labels"]["turnstile.dev/service"] == "statefulset-db"
        assert first["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "2"
        # resizing a queued StatefulSet other than to or from 0 is refused (its group is admitted whole)
        code, _, err = await kubectl(host.kubeconfig, "scale", "statefulset", "db", "-n", "ml", "--replicas=3")
        assert code != 0 and "scales only to and from 0" in err, err
        for name in sorted(running(host)):
            assert (await kubectl(host.kubeconfig, "delete", "pod", name, "-n", "ml", "--wait=false"))[0] == 0
        await eventually(
            lambda: running(host, "db-") == {"db-0", "db-1"}, what="the StatefulSet admitted whole", timeout=20
        )


async def test_leader_worker_sets_and_kserve_predictors_go_through_the_queue(tmp_path: Path, migrated_url: str) -> None:
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        gpu_pod = pod("x")["spec"]
        lws = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "llama", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
            "spec": {
                "replicas": 2,
                "leaderWorkerTemplate": {
                    "size": 2,
                    "leaderTemplate": {"metadata": {"labels": {"role": "leader"}}, "spec": gpu_pod},
                    "workerTemplate": {"metadata": {"labels": {"role": "worker"}}, "spec": gpu_pod},
                },
            },
        }
        code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(lws))
        assert code == 0, err
        # one group (a leader and its worker) per replica, each admitted whole: the 2-GPU quota holds one
        await eventually(
            lambda: len(running(host, "llama-")) == 2 and len(gated(host, "llama-")) == 2,
            what="one LeaderWorkerSet group running, the other waiting whole",
        )
        groups = {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in live(host, "llama-").values()}
        assert groups == {"leaderworkerset-llama-0", "leaderworkerset-llama-1"}
        first = {
            p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
            for n, p in live(host, "llama-").items()
            if n in running(host)
        }
        assert len(first) == 1  # both running pods are of the same group
        # KServe's InferenceService (its real shape; a vLLM-style predictor asking for one GPU)
        isvc = {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
            "spec": {
                "predictor": {
                    "minReplicas": 1,
                    "model": {
                        "modelFormat": {"name": "huggingface"},
                        "args": ["--model_id=meta-llama/Llama-3.1-8B-Instruct", "--backend=vllm"],
                        "resources": {"requests": {"cpu": "4"}, "limits": {"nvidia.com/gpu": "1"}},
                    },
                }
            },
        }
        code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(isvc))
        assert code == 0, err
        await eventually(lambda: gated(host, "chat-predictor-"), what="the predictor's pod held: no quota left")
        assert (await kubectl(host.kubeconfig, "delete", "leaderworkerset", "llama", "-n", "ml", "--wait=false"))[
            0
        ] == 0
        await eventually(lambda: len(running(host, "chat-predictor-")) == 1, what="the predictor admitted", timeout=20)
        started = next(iter(live(host, "chat-predictor-").values()))
        assert started["spec"]["nodeSelector"] == {"gpu": "a100"}
        assert started["metadata"]["labels"]["turnstile.dev/service"] == "deployment-chat-predictor"


async def test_running_pods_survive_a_controller_restart_and_the_queue_goes_on(
    tmp_path: Path, migrated_url: str
) -> None:
    """Level-triggered from PostgreSQL and the pods: a new replica finds the running pod and group
    admitted (it neither deletes nor re-gates them) and admits the pod that waited meanwhile."""
    async with configured(tmp_path, migrated_url) as (host, _kube, port):
        async with replica(host, migrated_url, tmp_path / "certs", port, cert_secret=None):
            assert (await create(host, pod("solo")))[0] == 0
            for name in ("pair-0", "pair-1"):
                member = pod(name, gpus=0)
                member["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "pair"
                member["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = "2"
                assert (await create(host, member))[0] == 0
            await eventually(lambda: running(host) == {"solo", "pair-0", "pair-1"}, what="admitted before the restart")
            assert (await create(host, pod("second", runtime="1")))[0] == 0
            await eventually(lambda: "second" in running(host), what="second admitted")
            assert (await create(host, pod("third")))[0] == 0
            await eventually(lambda: "third" in gated(host), what="third waits for quota")
            before = {n: p["metadata"]["resourceVersion"] for n, p in live(host).items() if n in ("solo", "pair-0")}
        # the controller is down: second finishes meanwhile; its quota is released by the next replica
        await eventually(lambda: "second" not in running(host), what="second finished while no controller ran")
        async with replica(host, migrated_url, tmp_path / "certs", port, cert_secret=None):
            await eventually(lambda: "third" in running(host), what="third admitted by the new replica", timeout=20)
            assert {"solo", "pair-0", "pair-1"} <= running(host)
            # the running pods were not touched at all (no patch, no deletion)
            assert {n: live(host)[n]["metadata"]["resourceVersion"] for n in before} == before


async def test_a_preempted_group_is_deleted_whole_and_its_owner_queues_it_again(
    tmp_path: Path, migrated_url: str
) -> None:
    """A LeaderWorkerSet group preempted by a higher-priority pod: every pod of the group is deleted
    (never half), and the LeaderWorkerSet makes the group again, which waits gated as a new workload."""
    async with cluster(tmp_path, migrated_url) as (host, _kube):
        assert (await create(host, priority_class("urgent", 500)))[0] == 0
        lws = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "llm", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": pod("x")["spec"]}}},
        }
        assert (await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(lws)))[0] == 0
        await eventually(lambda: running(host, "llm-") == {"llm-0", "llm-0-1"}, what="the group running")
        first = {n: p["metadata"]["uid"] for n, p in live(host, "llm-").items()}
        code, _, err = await create(host, pod("urgent", priorityClassName="urgent"))
        assert code == 0, err
        await eventually(lambda: "urgent" in running(host), what="the urgent pod admitted", timeout=20)
        # the whole group went, and came back as new pods waiting for quota
        await eventually(
            lambda: (
                gated(host, "llm-") == {"llm-0", "llm-0-1"}
                and not set(first.values()) & {p["metadata"]["uid"] for p in live(host, "llm-").values()}
            ),
            what="the group re-created by its LeaderWorkerSet, waiting whole",
        )
        assert not running(host, "llm-")
