"""kubectl, a client nobody here wrote, against the simulated API server (when kubectl is on PATH)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from admission.sim.host import SimHost
from tests.admission.runner import KUBECTL, kubectl

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")


@pytest_asyncio.fixture
async def kubeconfig(tmp_path: Path) -> AsyncIterator[Path]:
    host = await SimHost.start(tmp_path / "kubeconfig")
    yield host.kubeconfig
    await host.stop()


JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "demo", "namespace": "team-a"},
    "spec": {
        "suspend": True,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
    },
}


async def test_kubectl_round_trip(kubeconfig: Path) -> None:
    code, out, _ = await kubectl(kubeconfig, "version", "-o", "json")
    assert code == 0 and json.loads(out)["serverVersion"]["gitVersion"] == "v1.31.0-turnstile-sim"
    assert (await kubectl(kubeconfig, "create", "namespace", "team-a"))[0] == 0
    code, out, err = await kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps(JOB))
    assert code == 0, err
    code, out, _ = await kubectl(kubeconfig, "patch", "job", "demo", "-n", "team-a", "-p", '{"spec":{"suspend":false}}')
    assert code == 0 and "patched" in out
    code, out, _ = await kubectl(kubeconfig, "get", "job", "demo", "-n", "team-a", "-o", "json")
    got = json.loads(out)
    assert got["spec"]["suspend"] is False and got["metadata"]["generation"] == 2
    stale = dict(JOB, metadata={**JOB["metadata"], "resourceVersion": "1"})  # type: ignore[dict-item]
    code, _, err = await kubectl(kubeconfig, "replace", "-f", "-", stdin=json.dumps(stale))
    assert code != 0 and "the object has been modified" in err
    assert (await kubectl(kubeconfig, "delete", "job", "demo", "-n", "team-a"))[0] == 0
    code, _, err = await kubectl(kubeconfig, "get", "job", "demo", "-n", "team-a")
    assert code != 0 and 'jobs.batch "demo" not found' in err


async def test_kubectl_validates_applies_and_prints_as_on_a_real_cluster(tmp_path: Path) -> None:
    """Without --validate=false: kubectl validates through the server (fieldValidation=Strict);
    apply works twice (strategic merge with kubectl's directives); get prints the real columns;
    logs find a job's pod through its selector; a job without a runtime ends after the default."""
    host = await SimHost.start(tmp_path / "kubeconfig", default_runtime=1.0)
    config = host.kubeconfig
    try:
        job = json.loads(json.dumps(JOB))
        job["metadata"]["namespace"] = "default"
        job["spec"]["suspend"] = False
        code, out, err = await kubectl(config, "apply", "-f", "-", stdin=json.dumps(job))
        assert code == 0 and "job.batch/demo created" in out, err
        job["metadata"]["labels"] = {"team": "a"}
        code, out, err = await kubectl(config, "apply", "-f", "-", stdin=json.dumps(job))
        assert code == 0 and "configured" in out, err
        typo = json.loads(json.dumps(job))
        typo["metadata"]["name"] = "typo"
        typo["spec"]["parallelizm"] = 2
        code, _, err = await kubectl(config, "create", "-f", "-", stdin=json.dumps(typo))
        assert code != 0 and 'unknown field "spec.parallelizm"' in err, err
        code, out, _ = await kubectl(config, "get", "jobs")
        assert out.split("\n")[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"], out
        code, out, _ = await kubectl(config, "get", "pods", "-l", "job-name=demo")
        assert out.split("\n")[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], out
        assert "demo-main-0" in out
        code, out, err = await kubectl(config, "logs", "job/demo")
        assert code == 0 and "pod default/demo-main-0" in out, err
        code, out, _ = await kubectl(config, "get", "crd")
        assert "pytorchjobs.kubeflow.org" in out and out.split()[:3] == ["NAME", "CREATED", "AT"]
        for _ in range(100):  # 1 s of default runtime
            code, out, _ = await kubectl(config, "get", "job", "demo")
            if "Complete" in out:
                break
            await asyncio.sleep(0.1)
        assert "Complete" in out and "1/1" in out, out
    finally:
        await host.stop()


async def test_a_kind_the_server_does_not_serve_gets_kubectls_real_message(kubeconfig: Path) -> None:
    """kubectl falls back to /openapi/v2 (protobuf only) for a group-version /openapi/v3 lacks; a
    real server's answer lets it say "no matches for kind" and apply the rest, as here."""
    docs = (
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: default}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default}\n"
    )
    code, out, err = await kubectl(kubeconfig, "apply", "-f", "-", stdin=docs)
    assert code == 1 and 'no matches for kind "Widget" in version "example.com/v1"' in err, err
    assert "ensure CRDs are installed first" in err and "proto:" not in err, err
    assert "configmap/c created" in out, out  # (kubectl goes on with what it can map, as on a real cluster)


async def test_events_are_one_storage_served_through_both_apis(kubeconfig: Path) -> None:
    """As on a real server: a core v1 Event is listed by events.k8s.io/v1 (regarding, note), and
    one posted through events.k8s.io/v1 is a core Event (involvedObject, message)."""
    core = {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1", "namespace": "default"},
        "involvedObject": {"kind": "Job", "name": "j", "namespace": "default"},
        "reason": "Pending", "message": "waiting for quota", "type": "Normal",
    }  # fmt: skip
    code, _, err = await kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps(core))
    assert code == 0, err
    code, out, err = await kubectl(kubeconfig, "get", "events.v1.events.k8s.io", "-n", "default", "-o", "json")
    assert code == 0, err
    (item,) = json.loads(out)["items"]
    assert (item["regarding"]["name"], item["note"], item["reason"]) == ("j", "waiting for quota", "Pending"), item
    assert "involvedObject" not in item and "message" not in item, item
    newer = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e2", "namespace": "default"},
        "regarding": {"kind": "Job", "name": "k", "namespace": "default"}, "note": "admitted",
        "reason": "Admitted", "type": "Normal", "eventTime": "2026-12-04T20:00:00.000000Z",
        "reportingController": "turnstile", "reportingInstance": "turnstile-0", "action": "Admit",
    }  # fmt: skip
    code, _, err = await kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps(newer))
    assert code == 0, err
    code, out, err = await kubectl(kubeconfig, "get", "events", "-n", "default", "-o", "json")
    assert code == 0, err
    shown = {i["metadata"]["name"]: i for i in json.loads(out)["items"]}
    assert shown["e2"]["involvedObject"]["name"] == "k" and shown["e2"]["message"] == "admitted", shown["e2"]
    code, out, err = await kubectl(kubeconfig, "get", "events.v1.events.k8s.io", "-n", "default")
    assert code == 0 and "Pending" in out and "Admitted" in out, (out, err)


async def test_sort_by_prints_the_rows_sorted(kubeconfig: Path) -> None:
    """kubectl --sort-by asks for whole objects in the Table's rows and decodes them by kind."""
    for name in ("x", "a"):
        code, _, err = await kubectl(kubeconfig, "create", "configmap", name, "-n", "default")
        assert code == 0, err
    code, out, err = await kubectl(kubeconfig, "get", "cm", "-n", "default", "--sort-by=.metadata.name")
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["a", "x"], out


async def test_a_claim_template_with_both_or_neither_request_form_is_refused_as_by_a_real_server(
    kubeconfig: Path,
) -> None:
    """Kubernetes' DRA validation beyond the schema: a request sets exactly one of ``exactly`` and
    ``firstAvailable``, a prioritized list has at most 8 uniquely named subrequests. A well-formed
    prioritized list is created."""
    assert (await kubectl(kubeconfig, "create", "namespace", "ml"))[0] == 0

    def template(*requests: dict[str, object]) -> str:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": list(requests)}}},
        }
        return json.dumps(body)

    sub = {"name": "a", "deviceClassName": "gpu.nvidia.com"}
    both = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}, "firstAvailable": [sub]}
    code, _, err = await kubectl(kubeconfig, "create", "-f", "-", stdin=template(both))
    assert code != 0 and "spec.spec.devices.requests[0]: Invalid value: null: exactly one of" in err, err
    code, _, err = await kubectl(kubeconfig, "create", "-f", "-", stdin=template({"name": "gpus"}))
    assert code != 0 and "spec.spec.devices.requests[0]: Required value: exactly one of" in err, err
    many = {"name": "gpus", "firstAvailable": [dict(sub, name=f"s{i}") for i in range(9)] + [sub]}
    code, _, err = await kubectl(kubeconfig, "create", "-f", "-", stdin=template(many))
    assert code != 0 and "firstAvailable: Too many: 10: must have at most 8 items" in err, err
    twice = {"name": "gpus", "firstAvailable": [sub, sub]}
    code, _, err = await kubectl(kubeconfig, "create", "-f", "-", stdin=template(twice))
    assert code != 0 and 'firstAvailable[1].name: Duplicate value: "a"' in err, err
    either = {"name": "gpus", "firstAvailable": [sub, dict(sub, name="b", count=2)]}
    code, out, err = await kubectl(kubeconfig, "create", "-f", "-", stdin=template(either))
    assert code == 0 and "created" in out, err
