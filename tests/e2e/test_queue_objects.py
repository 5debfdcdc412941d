"""Queues as Kubernetes objects, as a Kueue user meets them: kubectl against a simulated cluster
serving Kueue's CRDs, a controller replica with its webhook over TLS, PostgreSQL behind it.

The user applies their v1beta2 YAML unchanged, reads ``kubectl get cq,lq``, edits a quota with
``kubectl edit`` as themselves and finds it audited under their name, cannot delete a flavor in
use, and the CLI's writing commands point at kubectl instead of disagreeing with the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from admission.jobs import INTEGRATIONS
from admission.kube.client import Kube, KubeError, ResourceRef
from admission.sim.host import SimHost
from admission.store import database, source
from admission.webhook import configurations
from tests.admission.controller.world import eventually
from tests.admission.runner import KUBECTL, ROOT, kubectl, turnstile
from tests.e2e.dbproxy import proxied
from tests.e2e.test_install import free_port, installed, job, replica

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
CQS = ResourceRef("kueue.x-k8s.io/v1beta2", "ClusterQueue", "clusterqueues", namespaced=False)
RFS = ResourceRef("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "resourceflavors", namespaced=False)
JOBS = ResourceRef("batch/v1", "Job", "jobs")
TOPOLOGIES = ResourceRef("kueue.x-k8s.io/v1beta2", "Topology", "topologies", namespaced=False)
TOPOLOGY = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: racks}
spec:
  levels: [{nodeLabel: cloud.provider.com/topology-rack}, {nodeLabel: kubernetes.io/hostname}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: tas}
spec: {topologyName: racks}
"""

# Stored before the install moves into the cluster (as an earlier `turnstile apply` left it, v1beta1).
EARLIER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: spare}
"""

TEAMS = ROOT / "examples" / "queues" / "gpu-teams.yaml"  # plain Kueue v1beta2, applied unchanged
SERVICE = {"name": "turnstile-webhook", "namespace": "turnstile-system", "port": 443}
NAMES = ("127.0.0.1", "turnstile-webhook.turnstile-system.svc")  # the API server calls the Service by name


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, url: str) -> AsyncIterator[tuple[SimHost, Kube, int]]:
    """The install's cluster serving Kueue's CRDs, EARLIER in the store, Turnstile's webhooks and
    aggregated API registered for a replica at a port."""
    port = free_port()
    async with installed(tmp_path, url, config=EARLIER, kueue=True) as (host, kube, _engine):
        for config in configurations.configurations(
            {"url": f"https://127.0.0.1:{port}"}, None, integrations=INTEGRATIONS
        ):
            await kube.request("POST", f"/apis/admissionregistration.k8s.io/v1/{config['kind'].lower()}s", body=config)
        # the aggregated API as the install's manifests register it (the replica publishes its CA)
        host.route_service("turnstile-system", "turnstile-webhook", 443, f"https://127.0.0.1:{port}")
        for obj in configurations.api_services(SERVICE):
            await kube.request("POST", "/apis/apiregistration.k8s.io/v1/apiservices", body=obj)
        yield host, kube, port


def cli(url: str, *args: str) -> Any:
    return turnstile(*args, env={**os.environ, "TURNSTILE_DATABASE_URL": url})


# Polls run the CLI in a thread: a subprocess run inline would stall the replica, which shares
# this event loop, for the seconds each run takes.
async def _has(url: str, text: str, stream: str, *args: str) -> bool:
    return text in getattr(await asyncio.to_thread(cli, url, *args), stream)


async def _succeeds(url: str, *args: str) -> bool:
    return bool((await asyncio.to_thread(cli, url, *args)).returncode == 0)


async def _fails(url: str, *args: str) -> bool:
    return not await _succeeds(url, *args)


async def _cq_status(kube: Kube, name: str) -> dict[str, Any]:
    return dict((await kube.get(CQS, None, name)).get("status") or {})


async def _active(kube: Kube, name: str) -> bool:
    return any(c.get("type") == "Active" for c in (await _cq_status(kube, name)).get("conditions") or [])


async def test_a_kueue_user_manages_queues_with_kubectl(tmp_path: Path, migrated_url: str) -> None:
    async with (
        cluster(tmp_path, migrated_url) as (host, kube, port),
        replica(host, migrated_url, tmp_path / "certs", port, cert_secret=None),
    ):
        # What PostgreSQL held is exported into the cluster, and the install says where queues live now.
        await eventually(lambda: _exists(kube, RFS, "spare"), what="the stored flavor exported to the cluster")
        await eventually(
            lambda: _has(migrated_url, "configuration source: kubernetes", "stderr", "get", "rf"),
            what="the install's source: kubernetes",
        )
        # exported as kubectl apply would have made it: applying it again merges without a warning
        code, out, err = await kubectl(host.kubeconfig, "get", "rf", "spare", "-o", "json")
        assert code == 0, err
        spare = json.loads(out)
        again = {"apiVersion": spare["apiVersion"], "kind": spare["kind"], "metadata": {"name": "spare"},
                 "spec": spare.get("spec", {})}  # fmt: skip
        code, out, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(again))
        assert code == 0 and "last-applied-configuration" not in err, err

        # Existing v1beta2 YAML, unchanged, through kubectl; then kubectl get cq,lq shows Kueue's columns.
        code, out, err = await kubectl(host.kubeconfig, "apply", "-f", str(TEAMS))
        assert code == 0, err
        # (its Reconciled condition may come first, before the scheduler has the queue: wait for Active)
        await eventually(lambda: _active(kube, "team-a"), what="team-a's status written back", timeout=20)
        code, out, err = await kubectl(host.kubeconfig, "get", "cq,lq", "-A")
        assert code == 0, err
        header = out.splitlines()[0].split()
        assert header[:4] == ["NAME", "COHORT", "STRATEGY", "PENDING"], out
        row = next(line.split() for line in out.splitlines() if "clusterqueue.kueue.x-k8s.io/team-a" in line)
        assert row[1:3] == ["training", "BestEffortFIFO"] and row[5] == "True", out
        assert any("localqueue.kueue.x-k8s.io/team-b" in line and " team-b " in line for line in out.splitlines())

        # A job is admitted by the kubectl-declared queue, and the queue's status counts it.
        # (the example's LocalQueues name no namespace: kubectl puts them in default)
        body = json.dumps(_in_default(job("train", "team-b")))
        code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=body)
        assert code == 0, err
        await eventually(
            lambda: _admitted(kube, "team-b", 1), what="team-b's status counting the admitted job", timeout=20
        )

        # kubectl edit, as alice: validated, applied, audited with her name, seen by the scheduler.
        alice = host.kubeconfig_for("alice", tmp_path / "alice.kubeconfig")
        editor = tmp_path / "editor.sh"
        editor.write_text('#!/bin/sh\nsed -i \'s/nominalQuota: "8"/nominalQuota: "24"/\' "$1"\n')
        editor.chmod(0o755)
        proc = await asyncio.create_subprocess_exec(
            str(KUBECTL), "--kubeconfig", str(alice), "edit", "clusterqueue", "team-a",
            env={**os.environ, "KUBE_EDITOR": str(editor)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err_b = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err_b.decode()
        await eventually(
            lambda: _has(migrated_url, "alice", "stdout", "history", "clusterqueue/team-a"),
            what="alice's edit in the audit log",
            timeout=20,
        )
        history = cli(migrated_url, "history", "clusterqueue/team-a").stdout
        assert "-        nominalQuota: '8'" in history and "+        nominalQuota: '24'" in history, history
        assert "nvidia.com/gpu:a100=24" in cli(migrated_url, "get", "cq", "team-a").stdout

        # Two edits in quick succession by two people (kubectl and a GitOps tool): both audited, in order.
        bob = host.kubeconfig_for("system:serviceaccount:argocd:argocd-application-controller", tmp_path / "b")
        for who, policy in ((alice, "Hold"), (bob, "None")):
            body = json.dumps({"spec": {"stopPolicy": policy}})
            code, _, err = await kubectl(who, "patch", "clusterqueue", "team-b", "--type", "merge", "-p", body)
            assert code == 0, err
        await eventually(
            lambda: _has(migrated_url, "argocd", "stdout", "history", "clusterqueue/team-b"),
            what="both edits audited",
            timeout=20,
        )
        lines = [x for x in cli(migrated_url, "history", "clusterqueue/team-b").stdout.splitlines() if " UTC " in x]
        assert [x.split()[3] for x in lines[-2:]] == [
            "alice",
            "system:serviceaccount:argocd:argocd-application-controller",
        ]

        # Invalid objects are refused with every problem and its field path; nothing is stored.
        bad = {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "bad"},
            "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "a100", "resources": [
                {"name": "cpu", "nominalQuota": "4", "borrowingLimit": "2"}]}]}]},
        }  # fmt: skip
        code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(bad))
        assert code != 0 and "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit" in err, err
        assert "not found" in cli(migrated_url, "get", "cq", "bad").stderr
        # A LocalQueue's ClusterQueue cannot change, as in Kueue.
        body = json.dumps({"spec": {"clusterQueue": "team-a"}})
        code, _, err = await kubectl(host.kubeconfig, "patch", "lq", "team-b", "--type", "merge", "-p", body)
        assert code != 0 and "spec.clusterQueue: field is immutable" in err, err

        # A flavor in use cannot be deleted: its finalizer keeps it, and the status says why.
        code, _, err = await kubectl(host.kubeconfig, "delete", "resourceflavor", "a100", "--wait=false")
        assert code == 0, err
        kept = await eventually(lambda: _reconciled(kube, RFS, "a100", "InUse"), what="a100 kept", timeout=20)
        assert "clusterqueue/team-a" in kept["message"]
        assert cli(migrated_url, "get", "rf", "a100").returncode == 0  # still in PostgreSQL
        # A flavor nothing uses goes, from the cluster and from PostgreSQL, audited under who deleted
        # it (the DELETE review's user), not its last editor.
        carol = host.kubeconfig_for("carol", tmp_path / "carol.kubeconfig")
        code, _, err = await kubectl(carol, "delete", "resourceflavor", "spare")
        assert code == 0, err
        await eventually(lambda: _fails(migrated_url, "get", "rf", "spare"), what="spare deleted")
        audited = [x for x in cli(migrated_url, "history", "resourceflavor/spare").stdout.splitlines() if " UTC " in x]
        assert any("carol" in x and "delete" in x for x in audited), audited

        # A Topology is stored (no warning: the controller places by it) and kept
        # while a flavor names it, as a flavor is while a queue does.
        code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=TOPOLOGY)
        assert code == 0 and "not used" not in err, err
        await eventually(lambda: _succeeds(migrated_url, "get", "topology", "racks"), what="racks stored")

        async def guarded() -> bool:
            finalizers = (await kube.get(TOPOLOGIES, None, "racks"))["metadata"].get("finalizers") or []
            return "kueue.x-k8s.io/resource-in-use" in finalizers

        await eventually(guarded, what="the finalizer on racks")
        code, _, err = await kubectl(host.kubeconfig, "delete", "topology", "racks", "--wait=false")
        assert code == 0, err
        kept = await eventually(lambda: _reconciled(kube, TOPOLOGIES, "racks", "InUse"), what="racks kept", timeout=20)
        assert "resourceflavor/tas" in kept["message"]

        # The CLI's writing commands name the kubectl command instead of writing behind the cluster.
        refused = cli(migrated_url, "quota", "set", "team-a", "nvidia.com/gpu=4", "--flavor", "a100")
        assert refused.returncode == 1 and "kubectl patch clusterqueue team-a --type json" in refused.stderr
        command = refused.stderr.split("run: ", 1)[1].strip()
        code, _, err = await kubectl(host.kubeconfig, *_kubectl_args(command))
        assert code == 0, err  # the printed command works as printed
        await eventually(
            lambda: _has(migrated_url, "nvidia.com/gpu:a100=4", "stdout", "get", "cq", "team-a"),
            what="the printed command's edit applied",
        )
        for args in (("apply", "-f", str(TEAMS)), ("stop", "cq", "team-a"), ("delete", "rf", "a100")):
            refused = cli(migrated_url, *args)
            assert refused.returncode == 1 and "run: kubectl" in refused.stderr, (args, refused.stderr)

        # A LocalQueue and a job naming it in one kubectl apply: the job is not told the queue is missing
        together = job("together", "late")
        together["metadata"]["namespace"] = "default"
        late = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": "late", "namespace": "default"}, "spec": {"clusterQueue": "team-b"}}  # fmt: skip
        code, out, err = await kubectl(
            host.kubeconfig, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                 "items": [late, together]})
        )  # fmt: skip
        assert code == 0 and "does not exist" not in err, err


async def test_an_edit_while_the_database_is_away_is_applied_when_it_returns(tmp_path: Path, migrated_url: str) -> None:
    async with (
        proxied(migrated_url) as proxy,
        cluster(tmp_path, migrated_url) as (host, kube, port),
        replica(host, proxy.url(), tmp_path / "certs", port, cert_secret=None),
    ):
        await eventually(lambda: _exists(kube, RFS, "spare"), what="the stored flavor exported")
        proxy.cut()
        flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "h100"}}
        code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=json.dumps(flavor))
        assert code == 0, err  # the webhook needs no database: the edit is accepted
        waiting = await eventually(
            lambda: _reconciled(kube, RFS, "h100", "DatabaseUnavailable"), what="status: not applied", timeout=40
        )
        assert waiting["status"] == "False"
        proxy.heal()
        await eventually(lambda: _reconciled(kube, RFS, "h100", "Applied"), what="applied", timeout=40)
        assert cli(migrated_url, "get", "rf", "h100").returncode == 0


async def test_without_kueue_crds_the_database_stays_the_source(tmp_path: Path, migrated_url: str) -> None:
    host = await SimHost.start(tmp_path / "kubeconfig")
    try:
        async with replica(host, migrated_url, tmp_path / "certs", free_port(), cert_secret=None):
            await asyncio.sleep(1.0)
        engine = database.make_engine(migrated_url)
        async with database.transaction(database.sessions(engine)) as session:
            assert await source.get(session) == source.DATABASE
        await engine.dispose()
        applied = cli(migrated_url, "apply", "-f", str(TEAMS))
        assert applied.returncode == 0, applied.stderr
    finally:
        await host.stop()


def _in_default(body: dict[str, Any]) -> dict[str, Any]:
    body["metadata"]["namespace"] = "default"
    body["metadata"]["name"] = "train-default"
    return body


def _kubectl_args(command: str) -> list[str]:
    import shlex

    args = shlex.split(command)
    assert args[0] == "kubectl"
    return args[1:]


async def _exists(kube: Kube, ref: ResourceRef, name: str) -> bool:
    try:
        await kube.get(ref, None, name)
    except KubeError as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def _admitted(kube: Kube, name: str, count: int) -> bool:
    status = await _cq_status(kube, name)
    return status.get("admittedWorkloads") == count and status.get("reservingWorkloads") == count


async def _reconciled(kube: Kube, ref: ResourceRef, name: str, reason: str) -> dict[str, Any] | None:
    obj = await kube.get(ref, None, name)
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "turnstile.dev/Reconciled" and c.get("reason") == reason:
            return dict(c)
    return None


VIEWER = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: workload-reader, namespace: default}
rules:
- {apiGroups: [turnstile.dev], resources: [workloads], verbs: [get, list]}
- {apiGroups: [visibility.kueue.x-k8s.io], resources: [localqueues/pendingworkloads], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-reads-workloads, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: workload-reader}
subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
"""


async def test_workloads_and_pending_positions_through_the_api_server(tmp_path: Path, migrated_url: str) -> None:
    """kubectl get workloads.turnstile.dev -A (plain ``workloads`` are Kueue's objects, as with Kueue,
    tests/e2e/test_workload_objects.py) and Kueue's visibility API, served by the replicas through an
    APIService, authorized by the API server's RBAC; when no replica answers, only that group fails."""
    async with cluster(tmp_path, migrated_url) as (host, kube, port):
        async with replica(host, migrated_url, tmp_path / "certs", port, cert_secret=None, names=NAMES):
            code, _, err = await kubectl(host.kubeconfig, "apply", "-f", str(TEAMS))
            assert code == 0, err
            await eventually(lambda: _cq_status(kube, "team-b"), what="team-b applied", timeout=20)
            for i in range(5):  # team-b has 8 GPUs and may borrow team-a's 8: four of these run, one waits
                body = _in_default(job(f"train-{i}", "team-b"))
                body["metadata"]["name"] = f"train-{i}"
                body["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
                code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=json.dumps(body))
                assert code == 0, err
            await eventually(lambda: _admitted(kube, "team-b", 4), what="four admitted", timeout=20)

            # Everyone's workloads, in Kueue's columns and ours, paged as kubectl pages them.
            code, out, err = await kubectl(host.kubeconfig, "get", "workloads.turnstile.dev", "-A", "--chunk-size", "1")
            assert code == 0, err
            lines = out.splitlines()
            assert lines[0].split()[:4] == ["NAMESPACE", "NAME", "QUEUE", "RESERVED"], out
            rows = [line.split() for line in lines[1:]]
            assert len(rows) == 5 and all(r[1].startswith("job-train-") for r in rows), out
            assert [r[5] for r in rows if r[3] == "team-b"].count("Admitted") == 4, out  # (Finished is empty)
            assert any("Pending" in r and "team-b" in r for r in rows), out
            # One, as Kueue shows it: GPUs as "4", never milli-units.
            code, out, err = await kubectl(host.kubeconfig, "get", "twl", "-n", "default", rows[0][1], "-o", "json")
            assert code == 0, err
            one = json.loads(out)
            assert one["kind"] == "Workload" and one["spec"]["queueName"] == "team-b"
            assert str(uuid.UUID(one["metadata"]["uid"])) == one["metadata"]["uid"], "a UID, as every object's is"
            requests = one["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
            assert requests["nvidia.com/gpu"] == "4"
            # Kueue's visibility API: the waiting one, first in line.
            raw = "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/team-b/pendingworkloads"
            code, out, err = await kubectl(host.kubeconfig, "get", "--raw", raw)
            assert code == 0, err
            (waiting,) = json.loads(out)["items"]
            assert waiting["positionInClusterQueue"] == 0 and waiting["localQueueName"] == "team-b"
            # v1beta1 (Kueue v0.15-v0.19 clients): the same answer, in the version asked
            code, out, err = await kubectl(host.kubeconfig, "get", "--raw", raw.replace("v1beta2", "v1beta1"))
            assert code == 0, err
            old = json.loads(out)
            assert old["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta1" and old["items"] == [waiting], old

            # A data scientist reads what RBAC lets them: their namespace, not the cluster.
            code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=VIEWER)
            assert code == 0, err
            alice = host.kubeconfig_for("alice", tmp_path / "alice.kubeconfig")
            code, out, err = await kubectl(alice, "get", "workloads.turnstile.dev", "-n", "default")
            assert code == 0 and len(out.splitlines()) == 6, (out, err)
            code, _, err = await kubectl(alice, "get", "workloads.turnstile.dev", "-A")
            assert code != 0 and 'User "alice" cannot list resource "workloads"' in err, err
            code, _, err = await kubectl(alice, "get", "workloads.turnstile.dev", "-n", "kube-system")
            assert code != 0 and "forbidden" in err, err
            mine = "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/default/localqueues/team-b/pendingworkloads"
            code, out, err = await kubectl(alice, "get", "--raw", mine)
            assert code == 0 and len(json.loads(out)["items"]) == 1, err
            code, _, err = await kubectl(alice, "get", "--raw", raw)
            assert code != 0, "the ClusterQueue's view needs a cluster-wide grant"

        # No replica answers: that group is unavailable, and nothing else breaks.
        code, _, err = await kubectl(host.kubeconfig, "get", "workloads.turnstile.dev", "-A")
        assert code != 0 and "the server is currently unable to handle the request" in err, err
        code, out, err = await kubectl(host.kubeconfig, "get", "cq")
        assert code == 0 and "team-a" in out, err
