"""The simulated API server, used through the real kubernetes_asyncio client over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from admission.sim.server import resources
from admission.sim.server.apiserver import ApiServer
from admission.sim.server.object_store import Watcher
from admission.sim.server.objects import Event
from admission.sim.server.watch import bookmark_version


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[tuple[ApiServer, client.ApiClient]]:
    server = ApiServer()
    runner = web.AppRunner(server.app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = client.Configuration(host=f"http://127.0.0.1:{port}")
    api = client.ApiClient(config)
    try:
        yield server, api
    finally:
        await api.close()
        await runner.cleanup()


def job(name: str, gpus: str = "1", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
                }
            },
        },
    }


async def test_discovery_and_namespaces(cluster: tuple[ApiServer, client.ApiClient]) -> None:
    _, api = cluster
    version = await client.VersionApi(api).get_code()
    assert version.major == "1"
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "team-a", "labels": {"team": "a"}}})
    names = [ns.metadata.name for ns in (await core.list_namespace()).items]
    assert {"default", "kube-system", "team-a"} <= set(names)
    groups = await client.ApisApi(api).get_api_versions()
    assert "kubeflow.org" in {g.name for g in groups.groups}


async def test_job_lifecycle_conflicts_and_status(cluster: tuple[ApiServer, client.ApiClient]) -> None:
    _, api = cluster
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job("default", job("train"))
    assert created.metadata.uid and created.metadata.generation == 1
    rv = created.metadata.resource_version
    with pytest.raises(ApiException) as dup:
        await batch.create_namespaced_job("default", job("train"))
    assert dup.value.status == 409 and '"reason": "AlreadyExists"' in dup.value.body.replace("'", '"')
    patched = await batch.patch_namespaced_job("train", "default", {"spec": {"suspend": False}})
    assert patched.spec.suspend is False and patched.metadata.generation == 2
    stale = job("train")
    stale["metadata"]["resourceVersion"] = rv
    with pytest.raises(ApiException) as conflict:
        await batch.replace_namespaced_job("train", "default", stale)
    assert conflict.value.status == 409
    status = await batch.patch_namespaced_job_status("train", "default", {"status": {"active": 2}})
    assert status.status.active == 2 and status.metadata.generation == 2  # status does not bump generation
    ignored = await batch.patch_namespaced_job("train", "default", {"status": {"active": 9}})
    assert ignored.status.active == 2  # the main resource cannot change status
    await batch.delete_namespaced_job("train", "default")
    with pytest.raises(ApiException) as gone:
        await batch.read_namespaced_job("train", "default")
    assert gone.value.status == 404


async def test_objects_need_an_existing_namespace(cluster: tuple[ApiServer, client.ApiClient]) -> None:
    _, api = cluster
    with pytest.raises(ApiException) as missing:
        await client.BatchV1Api(api).create_namespaced_job("nowhere", job("x"))
    assert missing.value.status == 404 and "namespaces" in missing.value.body


async def test_custom_resources_take_merge_and_json_patches_not_strategic(
    cluster: tuple[ApiServer, client.ApiClient],
) -> None:
    _, api = cluster
    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt"},
        "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {}},
    }
    await custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", body)
    merged = await custom.patch_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        "pt",
        {"spec": {"runPolicy": {"suspend": False}}},
        _content_type="application/merge-patch+json",
    )
    assert merged["spec"]["runPolicy"]["suspend"] is False
    jp = await custom.patch_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        "pt",
        [{"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "q"}}],
    )
    assert jp["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "q"}
    with pytest.raises(ApiException) as strategic:
        await custom.patch_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            "default",
            "pytorchjobs",
            "pt",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert strategic.value.status == 415


async def test_label_selectors_and_pagination(cluster: tuple[ApiServer, client.ApiClient]) -> None:
    _, api = cluster
    batch = client.BatchV1Api(api)
    for i, (team, tier) in enumerate([("a", "x"), ("a", "y"), ("b", "x"), ("a", "z")]):
        await batch.create_namespaced_job("default", job(f"j{i}", labels={"team": team, "tier": tier}))
    picked = await batch.list_namespaced_job("default", label_selector="team=a,tier in (x,y)")
    assert [j.metadata.name for j in picked.items] == ["j0", "j1"]
    assert [j.metadata.name for j in (await batch.list_namespaced_job("default", label_selector="team!=a")).items] == [
        "j2"
    ]
    page = await batch.list_namespaced_job("default", limit=3)
    assert len(page.items) == 3 and page.metadata._continue
    rest = await batch.list_namespaced_job("default", limit=3, _continue=page.metadata._continue)
    assert [j.metadata.name for j in rest.items] == ["j3"]
    one = await batch.list_namespaced_job("default", field_selector="metadata.name=j2")
    assert [j.metadata.name for j in one.items] == ["j2"]


async def test_pages_resume_after_the_last_key_even_when_objects_come_and_go(
    cluster: tuple[ApiServer, client.ApiClient],
) -> None:
    """As the real server's continue token: a page starts after the last key of the one before, so
    objects created or deleted between pages never make a kept object appear twice or be skipped;
    every page carries the first page's resourceVersion; a compacted one answers 410 Expired."""
    server, api = cluster
    batch = client.BatchV1Api(api)
    for i in range(10):
        await batch.create_namespaced_job("default", job(f"j{i}"))
    first = await batch.list_namespaced_job("default", limit=4)
    assert [j.metadata.name for j in first.items] == ["j0", "j1", "j2", "j3"]
    assert first.metadata.remaining_item_count == 6
    await batch.delete_namespaced_job("j1", "default")  # already read: must not shift the next page
    await batch.create_namespaced_job("default", job("j00"))  # sorts before the resume point: not seen
    second = await batch.list_namespaced_job("default", limit=4, _continue=first.metadata._continue)
    assert [j.metadata.name for j in second.items] == ["j4", "j5", "j6", "j7"]
    assert second.metadata.resource_version == first.metadata.resource_version
    rest = await batch.list_namespaced_job("default", limit=4, _continue=second.metadata._continue)
    assert [j.metadata.name for j in rest.items] == ["j8", "j9"] and not rest.metadata._continue
    filtered = await batch.list_namespaced_job("default", limit=2, label_selector="app!=none")
    assert filtered.metadata._continue and filtered.metadata.remaining_item_count is None
    server.store.compact()
    with pytest.raises(ApiException) as expired:
        await batch.list_namespaced_job("default", limit=4, _continue=first.metadata._continue)
    assert expired.value.status == 410 and json.loads(expired.value.body)["reason"] == "Expired"
    with pytest.raises(ApiException) as bad:
        await batch.list_namespaced_job("default", limit=4, _continue="not-a-token")
    assert bad.value.status == 400


async def test_events_are_selected_by_the_fields_kubectl_describe_uses(
    cluster: tuple[ApiServer, client.ApiClient],
) -> None:
    _, api = cluster
    core = client.CoreV1Api(api)
    for name, job_name, reason in (
        ("e1", "train", "Admitted"),
        ("e2", "other", "Admitted"),
        ("e3", "train", "Pending"),
    ):
        await core.create_namespaced_event(
            "default",
            {
                "metadata": {"name": name},
                "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "namespace": "default"},
                "reason": reason,
                "message": "m",
                "type": "Normal",
                "source": {"component": "turnstile"},
            },
        )
    selector = "involvedObject.name=train,involvedObject.namespace=default,involvedObject.kind=Job"
    found = await core.list_namespaced_event("default", field_selector=selector)
    assert sorted(e.metadata.name for e in found.items) == ["e1", "e3"]
    found = await core.list_namespaced_event("default", field_selector="reason!=Admitted,source=turnstile")
    assert [e.metadata.name for e in found.items] == ["e3"]
    with pytest.raises(client.ApiException) as refused:
        await core.list_namespaced_event("default", field_selector="spec.nodeName=x")
    assert refused.value.status == 400 and "field label not supported" in str(refused.value.body)


async def test_watch_resumes_from_a_version_and_410_after_compaction(
    cluster: tuple[ApiServer, client.ApiClient],
) -> None:
    server, api = cluster
    batch = client.BatchV1Api(api)
    listed = await batch.list_namespaced_job("default")
    rv = listed.metadata.resource_version
    await batch.create_namespaced_job("default", job("a"))
    await batch.patch_namespaced_job("a", "default", {"spec": {"suspend": False}})
    await batch.delete_namespaced_job("a", "default")
    seen = []
    w = watch.Watch()
    async with w.stream(batch.list_namespaced_job, "default", resource_version=rv, timeout_seconds=1) as stream:
        async for event in stream:
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 3:
                w.stop()
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    server.store.compact()
    with pytest.raises(ApiException) as expired:
        async with watch.Watch().stream(
            batch.list_namespaced_job, "default", resource_version=rv, timeout_seconds=1
        ) as stream:
            async for _ in stream:
                pass
    assert expired.value.status == 410


async def test_deleting_a_namespace_deletes_its_objects(cluster: tuple[ApiServer, client.ApiClient]) -> None:
    _, api = cluster
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    await core.create_namespace({"metadata": {"name": "gone"}})
    await batch.create_namespaced_job("gone", job("j"))
    await core.delete_namespace("gone")
    assert (await batch.list_job_for_all_namespaces()).items == []


async def test_unknown_fields_follow_field_validation_and_wrong_values_are_invalid(
    cluster: tuple[ApiServer, client.ApiClient],
) -> None:
    """As the real server: Strict (what kubectl sends) refuses an unknown field with 400; the default
    (Warn) drops it with a warning; a value of the wrong type is 422 Invalid with its path."""
    server, api = cluster
    batch = client.BatchV1Api(api)
    bad = job("typo")
    bad["spec"]["parallelizm"] = 2
    with pytest.raises(ApiException) as strict:
        await batch.create_namespaced_job("default", bad, field_validation="Strict")
    assert strict.value.status == 400
    assert 'strict decoding error: unknown field "spec.parallelizm"' in json.loads(strict.value.body)["message"]
    await batch.create_namespaced_job("default", bad)  # Warn: created, the field dropped
    stored = server.store.get(next(r for r in server.served if r.plural == "jobs"), "default", "typo")
    assert "parallelizm" not in stored["spec"]
    wrong = job("wrong")
    wrong["spec"]["parallelism"] = "two"
    with pytest.raises(ApiException) as invalid:
        await batch.create_namespaced_job("default", wrong)
    assert invalid.value.status == 422 and '"field": "spec.parallelism"' in invalid.value.body
    # a Go int32 field cannot hold more: a PriorityClass of 2^40 is refused, not stored
    huge = {"metadata": {"name": "huge"}, "value": 2**40}
    with pytest.raises(ApiException) as too_big:
        await client.SchedulingV1Api(api).create_priority_class(huge)
    assert too_big.value.status == 422 and '"field": "value"' in too_big.value.body
    # and a pod may not give its own priority (the Priority admission plugin computes it)
    pod = {"metadata": {"name": "own"}, "spec": {"containers": [{"name": "c", "image": "x"}], "priority": 2**40}}
    with pytest.raises(ApiException) as own:
        await client.CoreV1Api(api).create_namespaced_pod("default", pod)
    assert own.value.status == 403 and "must not be provided in pod spec" in own.value.body


@pytest.mark.parametrize(
    ("started", "change", "allowed"),
    [
        (False, {"template": {"spec": {"nodeSelector": {"gpu": "a100"}}}}, True),
        (False, {"template": {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}}, True),
        (False, {"template": {"spec": {"containers": [{"name": "c", "image": "other"}]}}}, False),
        (True, {"template": {"spec": {"nodeSelector": {"gpu": "a100"}}}}, False),
        (False, {"completions": 3}, False),
    ],
    ids=["node-selector", "tolerations", "containers", "after-start", "completions"],
)
async def test_job_template_rules(
    cluster: tuple[ApiServer, client.ApiClient], started: bool, change: dict[str, Any], allowed: bool
) -> None:
    _, api = cluster
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job("j"))
    if started:
        await batch.patch_namespaced_job_status("j", "default", {"status": {"startTime": "2026-11-30T00:00:00Z"}})
    try:
        result = await batch.patch_namespaced_job("j", "default", {"spec": change})
        assert allowed, "the change should have been refused"
        assert result.metadata.generation == 2
    except ApiException as exc:
        assert not allowed, exc.body
        assert exc.status == 422 and "field is immutable" in exc.body


async def test_injected_faults(cluster: tuple[ApiServer, client.ApiClient]) -> None:
    server, api = cluster
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job("j"))
    server.faults.error_rate = 1.0
    codes = set()
    for _ in range(12):
        with pytest.raises(ApiException) as exc:
            await batch.read_namespaced_job("j", "default")
        codes.add(exc.value.status)
        if exc.value.status == 429:
            assert exc.value.headers["Retry-After"] == "1"
    assert codes == {429, 500}
    server.faults.error_rate = 0.0
    server.faults.conflict_rate = 1.0
    with pytest.raises(ApiException) as conflict:
        await batch.patch_namespaced_job("j", "default", {"spec": {"suspend": False}})
    assert conflict.value.status == 409
    server.faults.conflict_rate = 0.0
    assert (await batch.read_namespaced_job("j", "default")).spec.suspend is True  # nothing was written


async def test_dropped_watches_end_and_can_resume(cluster: tuple[ApiServer, client.ApiClient]) -> None:
    server, api = cluster
    batch = client.BatchV1Api(api)
    rv = (await batch.list_namespaced_job("default")).metadata.resource_version
    seen: list[str] = []

    async def consume() -> None:
        w = watch.Watch()  # no timeout_seconds: the client re-watches when the server ends a stream
        async with w.stream(batch.list_namespaced_job, "default", resource_version=rv) as stream:
            async for event in stream:
                seen.append(event["object"].metadata.name)
                if len(seen) == 1:
                    server.drop_watches()
                if len(seen) == 2:
                    w.stop()

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.1)
    await batch.create_namespaced_job("default", job("first"))
    await asyncio.sleep(0.2)
    await batch.create_namespaced_job("default", job("second"))
    await asyncio.wait_for(task, timeout=10)
    # The stream was dropped, the client re-watched from the last version it saw: nothing lost, nothing twice.
    assert server.watches_served == 2
    assert seen == ["first", "second"]


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "color": {"type": "string"},
                                    "coats": {"type": "integer", "default": 1},  # filled when absent
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


async def test_installed_crds_are_served_and_their_schemas_enforced(
    cluster: tuple[ApiServer, client.ApiClient],
) -> None:
    _, api = cluster
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(WIDGET_CRD)
    custom = client.CustomObjectsApi(api)
    ok = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}}
    created = await custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", ok)
    assert created["spec"] == {"size": 3, "coats": 1}  # the schema's default, as the real server
    two = {**ok, "metadata": {"name": "two"}, "spec": {"size": 3, "coats": 2}}
    assert (await custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", two))["spec"][
        "coats"
    ] == 2
    bad = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "bad"},
        "spec": {"size": 0, "color": 7},
    }
    with pytest.raises(ApiException) as exc:
        await custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", bad)
    assert exc.value.status == 422
    body = json.loads(exc.value.body)
    assert {c["field"] for c in body["details"]["causes"]} == {"spec.size", "spec.color"}
    with pytest.raises(ApiException) as update:
        await custom.patch_namespaced_custom_object(
            "example.com",
            "v1",
            "default",
            "widgets",
            "w",
            {"spec": {"size": "big"}},
            _content_type="application/merge-patch+json",
        )
    assert update.value.status == 422
    listed = await custom.list_namespaced_custom_object("example.com", "v1", "default", "widgets")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["two", "w"]
    resources = await client.CustomObjectsApi(api).get_api_resources("example.com", "v1")
    assert "widgets" in {r.name for r in resources.resources}


async def test_unknown_fields_of_custom_resources_are_pruned_with_a_warning(
    cluster: tuple[ApiServer, client.ApiClient],
) -> None:
    _, api = cluster
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(WIDGET_CRD)
    custom = client.CustomObjectsApi(api)
    extra = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "labels": {"a": "b"}},
        "spec": {"size": 2, "shape": "round"},
        "extra": True,
    }
    created = await custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", extra)
    assert (
        created["spec"] == {"size": 2, "coats": 1}
        and "extra" not in created
        and created["metadata"]["labels"] == {"a": "b"}
    )
    warnings = api.last_response.getheader("Warning") or ""
    assert "unknown field" in warnings and "spec.shape" in warnings  # one Warning header per dropped field
    patched = await custom.patch_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w",
        {"spec": {"finish": "matte", "color": "red"}},
        _content_type="application/merge-patch+json",
    )
    assert patched["spec"] == {"size": 2, "coats": 1, "color": "red"}


def test_a_bookmark_never_runs_ahead_of_events_still_queued_for_its_stream() -> None:
    """A watch that ends right after a bookmark is resumed from it: a bookmark carrying the store's
    latest version while an older event still waited in the stream's queue lost that event."""
    jobs = next(r for r in resources.BUILT_IN if r.plural == "jobs")
    watcher = Watcher(jobs, None)
    assert bookmark_version(watcher, latest=40, sent=30) == 40  # nothing queued: all delivered
    watcher.queue.put_nowait(Event(35, "MODIFIED", jobs, {}))
    watcher.queue.put_nowait(Event(38, "MODIFIED", jobs, {}))
    assert bookmark_version(watcher, latest=40, sent=30) == 34


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda j: j["metadata"].update(name="Bad_Name"), "metadata.name", "is not a valid name"),
        (lambda j: j["metadata"].update(name="x" * 64), "metadata.name", "must be no more than 63 characters"),
        (lambda j: j["metadata"].update(labels={"team": "v" * 64}), "metadata.labels", "label value"),
        (lambda j: j["metadata"].update(annotations={"note": "n" * 300_000}), "metadata.annotations", "at most 262144"),
        (
            lambda j: _resources(j).update(limits={"nvidia.com/gpu": "-1"}),
            "limits.nvidia.com/gpu",
            ">= 0".replace(">=", "greater than or equal to"),
        ),
        (
            lambda j: _resources(j).update(limits={"nvidia.com/gpu": "0.5"}),
            "limits.nvidia.com/gpu",
            "must be an integer",
        ),
        (
            lambda j: _resources(j).update(limits={}, requests={"nvidia.com/gpu": "1"}),
            "resources.limits",
            "Limit must be set",
        ),
        (
            lambda j: _resources(j).update(limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "1"}),
            "resources.requests",
            "must be equal to nvidia.com/gpu limit of 2",
        ),
    ],
    ids=[
        "name",
        "job-name-too-long",
        "label-value",
        "annotations-total",
        "negative",
        "fractional-gpu",
        "no-limit",
        "request-not-limit",
    ],
)
async def test_objects_a_real_server_refuses_are_refused(
    cluster: tuple[ApiServer, client.ApiClient], change: Any, field: str, message: str
) -> None:
    _, api = cluster
    bad = job("good")
    change(bad)
    with pytest.raises(ApiException) as refused:
        await client.BatchV1Api(api).create_namespaced_job("default", bad)
    assert refused.value.status == 422
    causes = json.loads(refused.value.body)["details"]["causes"]
    assert any(field in c["field"] and message in c["message"] for c in causes), causes


def _resources(j: dict[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = j["spec"]["template"]["spec"]["containers"][0]["resources"]
    return resources


async def test_a_trainjobs_runtime_patches_change_only_while_it_is_suspended(
    cluster: tuple[ApiServer, client.ApiClient],
) -> None:
    """As Kubeflow Trainer's webhook: Turnstile writes its runtime patch before unsuspending."""
    _, api = cluster
    custom = client.CustomObjectsApi(api)
    group, version, plural = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
    body = {"apiVersion": f"{group}/{version}", "kind": "TrainJob", "metadata": {"name": "t"},
            "spec": {"suspend": True, "runtimeRef": {"name": "torch"}}}  # fmt: skip
    await custom.create_namespaced_custom_object(group, version, "default", plural, body)
    patch = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {}}
    both = [{"op": "add", "path": "/spec/suspend", "value": False},
            {"op": "add", "path": "/spec/runtimePatches", "value": [patch]}]  # fmt: skip
    with pytest.raises(ApiException) as refused:
        await custom.patch_namespaced_custom_object(group, version, "default", plural, "t", both)
    assert refused.value.status == 422 and "may be changed only while the TrainJob is suspended" in refused.value.body
    await custom.patch_namespaced_custom_object(group, version, "default", plural, "t", both[1:])
    started = await custom.patch_namespaced_custom_object(group, version, "default", plural, "t", both[:1])
    assert started["spec"]["suspend"] is False and started["spec"]["runtimePatches"] == [patch]


async def test_an_event_lives_in_its_objects_namespace_or_in_default(
    cluster: tuple[ApiServer, client.ApiClient],
) -> None:
    """As Kubernetes' legacyValidateEvent: a core/v1 Event about a namespaced object is in that
    object's namespace; one about a cluster-scoped object (no involvedObject.namespace) in default."""
    _, api = cluster
    core = client.CoreV1Api(api)

    def event(namespace: str | None, kind: str) -> dict[str, Any]:
        involved = {"apiVersion": "v1", "kind": kind, "name": "x", **({"namespace": namespace} if namespace else {})}
        return {"metadata": {"generateName": "x."}, "involvedObject": involved, "reason": "R", "message": "m"}

    await core.create_namespaced_event("default", event("default", "Pod"))
    await core.create_namespaced_event("default", event(None, "Node"))
    for namespace, body in (("default", event("other", "Pod")), ("kube-system", event(None, "Node"))):
        with pytest.raises(ApiException) as refused:
            await core.create_namespaced_event(namespace, body)
        assert refused.value.status == 422
        causes = json.loads(refused.value.body)["details"]["causes"]
        assert any("does not match event.namespace" in c["message"] for c in causes), causes
