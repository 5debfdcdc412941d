"""The simulated API server calls admission webhooks over TLS, as a real one does."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from admission.sim.server.apiserver import ApiServer
from admission.webhook import certs


async def _start(app: web.Application, ssl_context: Any = None) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def _webhook_app(calls: list[str]) -> web.Application:
    async def mutate(request: web.Request) -> web.Response:
        review = await request.json()
        req = review["request"]
        calls.append(f"mutate {req['operation']} {req['name']} by {req['userInfo']['username']}")
        patch = [
            {"op": "add", "path": "/spec/suspend", "value": True},
            {"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}},
        ]
        return web.json_response(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": req["uid"],
                    "allowed": True,
                    "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
                    "warnings": ["job suspended by the queue"],
                },
            }
        )

    async def validate(request: web.Request) -> web.Response:
        req = (await request.json())["request"]
        calls.append(f"validate {req['operation']} {req['name']} suspend={req['object']['spec'].get('suspend')}")
        allowed = req["name"] != "forbidden"
        response: dict[str, Any] = {"uid": req["uid"], "allowed": allowed}
        if not allowed:
            response["status"] = {"code": 403, "message": "LocalQueue nope does not exist; LocalQueues in default: q"}
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})

    app = web.Application()
    app.router.add_post("/mutate", mutate)
    app.router.add_post("/validate", validate)
    return app


@pytest_asyncio.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[client.ApiClient, list[str], int, bytes]]:
    cert = certs.issue(tmp_path, ["127.0.0.1", "localhost"])
    calls: list[str] = []
    hook_runner, hook_port = await _start(_webhook_app(calls), cert.server_context(tmp_path))
    server = ApiServer()
    api_runner, api_port = await _start(server.app)
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{api_port}"))
    try:
        yield api, calls, hook_port, cert.ca_crt
    finally:
        await api.close()
        await api_runner.cleanup()
        await hook_runner.cleanup()


def _config(kind: str, path: str, port: int, ca: bytes, policy: str = "Fail") -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": f"turnstile-{path[1:]}"},
        "webhooks": [
            {
                "name": f"{path[1:]}.turnstile.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": policy,
                "timeoutSeconds": 5,
                "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca).decode()},
                "rules": [
                    {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs"]}
                ],
                "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
            }
        ],
    }


def _job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}},
    }


async def test_mutating_then_validating_over_tls(setup: tuple[client.ApiClient, list[str], int, bytes]) -> None:
    api, calls, port, ca = setup
    reg = client.AdmissionregistrationV1Api(api)
    await reg.create_mutating_webhook_configuration(_config("MutatingWebhookConfiguration", "/mutate", port, ca))
    await reg.create_validating_webhook_configuration(_config("ValidatingWebhookConfiguration", "/validate", port, ca))
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job("default", _job("train"))
    assert created.spec.suspend is True and created.metadata.labels == {"mutated": "yes"}
    assert calls == [
        "mutate CREATE train by system:admin",
        "validate CREATE train suspend=True",
    ]  # validating sees the mutation
    with pytest.raises(ApiException) as denied:
        await batch.create_namespaced_job("default", _job("forbidden"))
    assert denied.value.status == 403
    assert 'admission webhook \\"validate.turnstile.dev\\" denied the request: LocalQueue nope' in denied.value.body
    calls.clear()
    await batch.create_namespaced_job("default", _job("skipped", {"skip": "1"}))  # objectSelector excludes it
    assert calls == []


async def test_warnings_come_back_as_headers(setup: tuple[client.ApiClient, list[str], int, bytes]) -> None:
    api, _, port, ca = setup
    await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
        _config("MutatingWebhookConfiguration", "/mutate", port, ca)
    )
    _, status, headers = await client.BatchV1Api(api).create_namespaced_job_with_http_info("default", _job("w"))
    assert status == 201 and "job suspended by the queue" in headers.get("Warning", "")


async def test_webhooks_see_who_asked(setup: tuple[client.ApiClient, list[str], int, bytes]) -> None:
    """The bearer token names the user (the simulator authenticates nobody), so an audit trail
    built from ``userInfo`` can be tested as a real cluster's would be."""
    api, calls, port, ca = setup
    await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
        _config("MutatingWebhookConfiguration", "/mutate", port, ca)
    )
    config = client.Configuration(host=api.configuration.host)
    config.api_key = {"BearerToken": "alice"}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    async with client.ApiClient(config) as alice:
        await client.BatchV1Api(alice).create_namespaced_job("default", _job("hers"))
    assert calls == ["mutate CREATE hers by alice"]


@pytest.mark.parametrize(("policy", "created"), [("Fail", False), ("Ignore", True)], ids=["Fail", "Ignore"])
async def test_an_untrusted_certificate_follows_the_failure_policy(
    setup: tuple[client.ApiClient, list[str], int, bytes],
    tmp_path: Path,
    policy: str,
    created: bool,
) -> None:
    api, calls, port, _ = setup
    other_ca = certs.issue(_fresh(tmp_path), ["127.0.0.1", "localhost"]).ca_crt
    await client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
        _config("MutatingWebhookConfiguration", "/mutate", port, other_ca, policy)
    )
    batch = client.BatchV1Api(api)
    if created:
        job = await batch.create_namespaced_job("default", _job("ok"))
        assert job.metadata.labels in (None, {})  # the webhook was skipped, not applied
    else:
        with pytest.raises(ApiException) as failed:
            await batch.create_namespaced_job("default", _job("ok"))
        assert failed.value.status == 500 and "failed calling webhook" in failed.value.body
    assert calls == []  # the TLS handshake failed before any request reached it


def _fresh(tmp_path: Path) -> Path:
    folder = tmp_path / "other-ca"
    folder.mkdir(exist_ok=True)
    return folder


async def test_match_conditions_choose_what_is_sent_and_must_compile(
    setup: tuple[client.ApiClient, list[str], int, bytes],
) -> None:
    """As the real server: a webhook is called only when every matchCondition holds (CEL over object,
    oldObject and request), and a configuration whose condition does not compile is refused."""
    api, calls, port, ca = setup
    reg = client.AdmissionregistrationV1Api(api)
    config = _config("ValidatingWebhookConfiguration", "/validate", port, ca)
    config["webhooks"][0]["matchConditions"] = [
        {"name": "named-train", "expression": "object.metadata.name.startsWith('train')"}
    ]
    await reg.create_validating_webhook_configuration(config)
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", _job("train-1"))
    await batch.create_namespaced_job("default", _job("other"))
    assert [c.split()[2] for c in calls] == ["train-1"], calls
    broken = _config("ValidatingWebhookConfiguration", "/validate", port, ca)
    broken["metadata"]["name"] = "broken"
    broken["webhooks"][0]["matchConditions"] = [{"name": "bad", "expression": "object.metadata.name.startsWith("}]
    with pytest.raises(ApiException) as refused:
        await reg.create_validating_webhook_configuration(broken)
    assert refused.value.status == 422 and "webhooks[0].matchConditions[0].expression" in refused.value.body
