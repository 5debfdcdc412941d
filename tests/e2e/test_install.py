"""The install as rendered from ``manifests/``, on the simulated cluster: its webhook
configurations (the Service reference pointed at the local replica) loaded as they are, two
controller replicas keeping the certificate in one Secret and publishing its CA, and jobs
created with kubectl going through the real webhook over TLS."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from admission.app import process
from admission.jobs import INTEGRATIONS
from admission.kube import client as kube_client
from admission.kube.client import Kube, ResourceRef
from admission.sim.host import SimHost
from admission.store import config as config_store
from admission.store import database
from admission.webhook import configurations, registration
from admission.webhook.keeper import SECRETS
from queues.kueue import codec
from tests.admission.controller.world import eventually
from tests.admission.runner import KUBECTL, kubectl

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
JOBS = ResourceRef("batch/v1", "Job", "jobs")
PODS = ResourceRef("v1", "Pod", "pods")

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: cpu, nominalQuota: "64"}, {name: nvidia.com/gpu, nominalQuota: "8"}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team-a, namespace: team}
spec: {clusterQueue: team-a}
"""


def job(name: str, queue: str) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def replica(
    host: SimHost,
    url: str,
    tmp: Path,
    port: int,
    *,
    cert_secret: str | None = "turnstile-system/turnstile-webhook-tls",
    names: tuple[str, ...] = ("127.0.0.1",),
) -> AsyncIterator[process.Endpoints]:
    ready = asyncio.Event()
    served: list[process.Endpoints] = []
    task = asyncio.create_task(
        process.serve(
            kubeconfig=host.kubeconfig,
            database_url=url,
            webhook_port=port,
            metrics_port=free_port(),
            ui_port=0,  # (two replicas on one host: each its own)
            cert_dir=tmp,
            cert_secret=cert_secret,
            bind_address="127.0.0.1",
            names=list(names),
            shutdown_delay=0.0,
            on_ready=lambda ep, _c: (served.append(ep), ready.set()),
        )
    )
    try:
        done, _ = await asyncio.wait(
            [task, asyncio.create_task(ready.wait())], timeout=60, return_when="FIRST_COMPLETED"
        )
        if task in done:
            task.result()
        assert ready.is_set(), "the replica did not become ready"
        yield served[0]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def installed(
    tmp_path: Path, url: str, *, config: str = CONFIG, kueue: bool = False
) -> AsyncIterator[tuple[SimHost, Kube, Any]]:
    """A simulated cluster with Turnstile's namespace and ``ml``, and ``config`` in the store;
    ``kueue``: the cluster serves Kueue's CRDs."""
    host = await SimHost.start(tmp_path / "kubeconfig", kueue=kueue)
    kube = Kube(await kube_client.connect(host.kubeconfig))
    engine = database.make_engine(url)
    try:
        for ns in ("turnstile-system", "ml", "team"):
            await kube.create(kube_client.NAMESPACES, None, {"metadata": {"name": ns}})
        async with database.transaction(database.sessions(engine)) as session:
            await config_store.apply(session, [codec.parse(d) for d in yaml.safe_load_all(config)], actor="test")
        yield host, kube, engine
    finally:
        await kube.close()
        await engine.dispose()
        await host.stop()


async def test_rendered_install_admits_kubectl_jobs_through_the_webhook(tmp_path: Path, migrated_url: str) -> None:
    rendered = subprocess.run(
        [str(KUBECTL), "kustomize", str(MANIFESTS)], check=True, capture_output=True, text=True
    ).stdout
    hooks = [d for d in yaml.safe_load_all(rendered) if d and d["kind"].endswith("WebhookConfiguration")]
    assert len(hooks) == 2
    async with installed(tmp_path, migrated_url) as (host, kube, engine):
        # One replica serves the webhook's address (the Service's endpoint); a second shares its Secret.
        port = free_port()
        for config in hooks:  # as rendered, but calling this machine instead of the Service
            for hook in config["webhooks"]:
                service = hook["clientConfig"].pop("service")
                assert "caBundle" not in hook["clientConfig"]  # the controller publishes it
                hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{service['path']}"
            plural = config["kind"].lower() + "s"
            await kube.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body=config)
        async with (
            replica(host, migrated_url, tmp_path / "a", port) as first,
            replica(host, migrated_url, tmp_path / "b", free_port()),
        ):
            await _nothing_of_the_queues_on_the_metrics_port(first)
            secret = await kube.get(SECRETS, "turnstile-system", "turnstile-webhook-tls")
            assert (tmp_path / "a" / "tls.crt").read_bytes() == (tmp_path / "b" / "tls.crt").read_bytes()
            for config in hooks:
                stored = await _configuration(kube, config)
                assert {h["clientConfig"]["caBundle"] for h in stored["webhooks"]} == {secret["data"]["ca.crt"]}
            # kubectl creates queued jobs: the webhook (TLS, verified against the published CA) suspends
            # them; the controller admits the one that fits and leaves the one that does not suspended.
            for name, gpus in (("train", "1"), ("too-big", "9")):
                body = job(name, "team-a")
                body["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = gpus
                code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(body))
                assert code == 0, err
            for _ in range(200):
                if (await kube.get(JOBS, "ml", "train"))["spec"].get("suspend") is False:
                    break
                await asyncio.sleep(0.05)
            started = await kube.get(JOBS, "ml", "train")
            assert started["spec"]["suspend"] is False and started["metadata"]["annotations"]["turnstile.dev/admission"]
            assert (await kube.get(JOBS, "ml", "too-big"))["spec"]["suspend"] is True
            # A job naming a LocalQueue that does not exist (yet) is held suspended, as Kueue, with a
            # warning that says what exists.
            code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(job("typo", "team-b")))
            assert code == 0 and "Warning:" in err and "team-b" in err and "team-a" in err, err
            assert (await kube.get(JOBS, "ml", "typo"))["spec"]["suspend"] is True
            # ml has LocalQueues but no default one: the leader labels it so that its unlabelled objects
            # asking for a GPU go through the (failing) managed webhooks, and they are held.
            await eventually(lambda: _scope(kube, "ml", configurations.EXTENDED), what="ml labelled for the webhooks")
            # Re-applying the install (an upgrade) resets the webhooks as rendered: nothing of the scope
            # lives there, so a GPU job created right after is held all the same.
            for config in hooks:
                code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(config))
                assert code == 0, err
            code, _, err = await kubectl(
                host.kubeconfig, "create", "-f", "-", stdin=json.dumps(unlabelled("gpu-nolabel"))
            )
            assert code == 0 and "held" in err, err
            assert (await kube.get(JOBS, "ml", "gpu-nolabel"))["spec"]["suspend"] is True
            await eventually(lambda: _scope(kube, "team", configurations.EXTENDED), what="team labelled too")
            # A LocalQueue named default: the leader puts ml in the scope of the defaulted webhooks,
            # so an unlabelled job there is labelled and suspended (queued) like a labelled one.
            async with database.transaction(database.sessions(engine)) as session:
                await config_store.apply(session, [codec.parse(yaml.safe_load(DEFAULT_QUEUE))], actor="test")
            await eventually(lambda: _scope(kube, "ml", configurations.ALL), what="ml in the defaulted webhooks' scope")
            code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(unlabelled("nolabel")))
            assert code == 0, err
            queued = await kube.get(JOBS, "ml", "nolabel")
            assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
            pod = await kube.create(PODS, "team", _jobs_pod("worker-0"))  # as the Job controller makes it
        # Turnstile is down (both replicas gone): only what it must queue or hold is refused.
        for ns in ("other",):
            await kube.create(kube_client.NAMESPACES, None, {"metadata": {"name": ns}})
        allowed = [unlabelled("free", "other"), unlabelled("cpu-only", "team", gpus=None)]
        for body in allowed:
            code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(body))
            assert code == 0, (body["metadata"], err)
        # a job's pods: created, and their tracking finalizer removed, as the Job controller does
        await kube.create(PODS, "team", _jobs_pod("worker-1"))
        finalizers = [{"op": "remove", "path": "/metadata/finalizers/0"}]
        await kube.patch(PODS, "team", "worker-0", finalizers, content_type=kube_client.JSON_PATCH)
        # a CPU-only pod in a managed namespace (kubectl run) is not Turnstile's
        code, _, err = await kubectl(host.kubeconfig, "run", "debug", "-n", "team", "--image=busybox")
        assert code == 0, err
        refused = [job("down-labelled", "team-a"), unlabelled("down-default"), unlabelled("down-gpu", "team")]
        for body in refused:
            code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(body))
            assert code != 0 and "failed calling webhook" in err, (body["metadata"], err)
        assert pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]


async def _nothing_of_the_queues_on_the_metrics_port(ep: process.Endpoints) -> None:
    """The metrics port serves /metrics and health only; the dashboard and the visibility API are on
    the UI's own listener, bound to loopback."""
    async with aiohttp.ClientSession() as http:
        for path in (
            "/ui/",
            "/ui/api/audit",
            "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/team-a/pendingworkloads",
        ):
            async with http.get(f"http://127.0.0.1:{ep.metrics_port}{path}") as answer:
                assert answer.status == 404, (path, answer.status)
        async with http.get(f"http://127.0.0.1:{ep.metrics_port}/metrics") as answer:
            assert answer.status == 200
        async with http.get(f"http://127.0.0.1:{ep.ui_port}/ui/") as answer:
            assert answer.status == 200
    assert ep.ui is not None
    hosts = {address[0] for address in ep.ui.addresses}
    assert hosts == {"127.0.0.1"}, hosts


def _jobs_pod(name: str) -> dict[str, Any]:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "0000-job", "controller": True}
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "metadata": {"name": name, "ownerReferences": [owner], "finalizers": ["batch.kubernetes.io/job-tracking"]},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }


DEFAULT_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: default, namespace: ml}
spec: {clusterQueue: team-a}
"""


def unlabelled(name: str, namespace: str = "ml", gpus: str | None = "1") -> dict[str, Any]:
    body = job(name, "x")
    body["metadata"]["namespace"] = namespace
    del body["metadata"]["labels"]
    if gpus is None:
        del body["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    return body


async def _configuration(kube: Kube, config: dict[str, Any]) -> dict[str, Any]:
    plural = config["kind"].lower() + "s"
    return await kube.request("GET", f"/apis/admissionregistration.k8s.io/v1/{plural}/{config['metadata']['name']}")


async def _scope(kube: Kube, namespace: str, value: str) -> bool:
    ns = await kube.get(kube_client.NAMESPACES, None, namespace)
    return bool((ns["metadata"].get("labels") or {}).get(configurations.SCOPE_LABEL) == value)


async def test_replicas_with_their_own_certificates_are_all_trusted(tmp_path: Path, migrated_url: str) -> None:
    """Two replicas, each with its own --cert-dir (no shared Secret): each issues a CA, and the
    published caBundle trusts both (merged, never last-writer-wins), also after one exits."""
    async with installed(tmp_path, migrated_url) as (host, kube, _engine):
        ports = [free_port(), free_port()]
        for config in configurations.configurations(
            {"url": f"https://127.0.0.1:{ports[0]}"}, None, integrations=INTEGRATIONS
        ):
            plural = config["kind"].lower() + "s"
            await kube.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body=config)
        async with replica(host, migrated_url, tmp_path / "a", ports[0], cert_secret=None):
            async with replica(host, migrated_url, tmp_path / "b", ports[1], cert_secret=None):
                cas = [(tmp_path / d / "ca.crt").read_bytes() for d in ("a", "b")]
                assert cas[0] != cas[1]
                stored = await kube.request(
                    "GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/turnstile-mutate"
                )
                for hook in stored["webhooks"]:
                    assert all(registration.trusts(hook["clientConfig"]["caBundle"], ca) for ca in cas)
            # b is gone; a (whose address the configuration calls) is still trusted: a job goes through
            code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(job("after", "team-a")))
            assert code == 0, err
            assert (await kube.get(JOBS, "ml", "after"))["spec"]["suspend"] is True
        await host.stop()
