"""Kueue's Workload objects as a Kueue operator uses them, with kubectl only: listed with Kueue's
columns, stopped and resumed through ``spec.active`` (audited under the user who did it), made
again when deleted, and guarded: no other spec change, no Workload made by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from admission.kube.client import Kube
from tests.admission.controller.world import eventually
from tests.admission.runner import KUBECTL, kubectl, turnstile
from tests.e2e.test_install import job, replica
from tests.e2e.test_queue_objects import JOBS, NAMES, TEAMS, _admitted, _cq_status, _in_default, cluster

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")

# alice may edit workloads in default: what the install's turnstile-workload-editor adds to `edit`
EDITOR = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: workload-editor, namespace: default}
rules:
- {apiGroups: [kueue.x-k8s.io], resources: [workloads], verbs: [get, list, watch, patch, update, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-edits-workloads, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: workload-editor}
subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
"""
BY_HAND = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: by-hand, namespace: default}
spec:
  queueName: team-b
  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c, image: x}]}}}]
"""


async def _workloads(config: Path) -> dict[str, dict[str, Any]]:
    code, out, err = await kubectl(config, "get", "workloads.kueue.x-k8s.io", "-n", "default", "-o", "json")
    assert code == 0, err
    return {o["metadata"]["name"]: o for o in json.loads(out)["items"]}


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return f"{found[0]['status']}/{found[0]['reason']}" if found else None


async def _suspended(kube: Kube, name: str) -> bool:
    return bool((await kube.get(JOBS, "default", name))["spec"].get("suspend"))


async def test_a_kueue_operator_stops_resumes_and_deletes_workloads_with_kubectl(
    tmp_path: Path, migrated_url: str
) -> None:
    async with (
        cluster(tmp_path, migrated_url) as (host, kube, port),
        replica(host, migrated_url, tmp_path / "certs", port, cert_secret=None, names=NAMES),
    ):
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

        async def shown() -> dict[str, dict[str, Any]] | None:
            objects = await _workloads(host.kubeconfig)
            admitted = [o for o in objects.values() if _condition(o, "Admitted") == "True/Admitted"]
            return objects if len(objects) == 5 and len(admitted) == 4 else None

        objects = await eventually(shown, what="five Workload objects, four admitted", timeout=20)
        code, out, err = await kubectl(host.kubeconfig, "get", "wl", "-n", "default")
        assert code == 0, err
        assert out.splitlines()[0].split() == ["NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "AGE"]
        running = next(n for n, o in objects.items() if _condition(o, "Admitted") == "True/Admitted")
        waiting = next(n for n, o in objects.items() if _condition(o, "Admitted") is None)
        running_job = objects[running]["metadata"]["ownerReferences"][0]["name"]
        waiting_job = objects[waiting]["metadata"]["ownerReferences"][0]["name"]

        # alice stops a running workload (what kubectl kueue stop workload does): its quota goes
        # to the one that waited; the edit is audited under her name.
        code, _, err = await kubectl(host.kubeconfig, "apply", "-f", "-", stdin=EDITOR)
        assert code == 0, err
        alice = host.kubeconfig_for("alice", tmp_path / "alice.kubeconfig")
        stop = json.dumps({"spec": {"active": False}})
        code, _, err = await kubectl(alice, "patch", "wl", running, "-n", "default", "--type", "merge", "-p", stop)
        assert code == 0, err
        await eventually(lambda: _suspended(kube, running_job), what="the stopped job suspended", timeout=20)
        await eventually(lambda: _not_suspended(kube, waiting_job), what="the waiting job started", timeout=20)
        stopped = await eventually(
            lambda: _when(host.kubeconfig, running, lambda o: _condition(o, "Evicted") == "True/Deactivated"),
            what="the stopped Workload Evicted/Deactivated",
        )
        assert stopped["spec"]["active"] is False and "status" in stopped and "admission" not in stopped["status"]
        history = turnstile(
            "history", f"workload/default/{running}", env={**os.environ, "TURNSTILE_DATABASE_URL": migrated_url}
        )
        assert f"alice  update  workload/default/{running}" in history.stdout, history

        # Only spec.active may change; nobody makes a Workload by hand.
        other = json.dumps({"spec": {"priority": 1000}})
        code, _, err = await kubectl(alice, "patch", "wl", running, "-n", "default", "--type", "merge", "-p", other)
        assert code != 0 and "spec.priority cannot be changed" in err, err
        code, _, err = await kubectl(host.kubeconfig, "create", "-f", "-", stdin=BY_HAND)
        assert code != 0 and "Turnstile makes Workloads from queued jobs" in err, err

        # Resumed: it queues again (the quota it had is taken now: it waits).
        resume = json.dumps({"spec": {"active": True}})
        code, _, err = await kubectl(alice, "patch", "wl", running, "-n", "default", "--type", "merge", "-p", resume)
        assert code == 0, err
        back = await eventually(
            lambda: _when(host.kubeconfig, running, lambda o: o["spec"]["active"] is True
                          and _condition(o, "QuotaReserved") == "False/WaitingForQuota"),
            what="the resumed Workload waiting again",
        )  # fmt: skip
        assert await _suspended(kube, running_job)

        # Deleted while its job waits: a new Workload object of the same name.
        code, _, err = await kubectl(alice, "delete", "wl", running, "-n", "default")
        assert code == 0, err
        uid = back["metadata"]["uid"]
        again = await eventually(
            lambda: _when(host.kubeconfig, running, lambda o: o["metadata"]["uid"] != uid),
            what="the deleted Workload made again",
        )
        assert again["spec"]["queueName"] == "team-b" and again["spec"]["active"] is True


async def _not_suspended(kube: Kube, name: str) -> bool:
    return not await _suspended(kube, name)


async def _when(config: Path, name: str, check: Any) -> dict[str, Any] | None:
    obj = (await _workloads(config)).get(name)
    return obj if obj is not None and check(obj) else None
