"""The API client's HTTP session: it looks for environment proxies and ``~/.netrc`` only where the
environment has something to find (each look is a worker-thread hop per request)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admission.kube import client as kube_client
from admission.kube.client import NAMESPACES, Kube
from admission.sim.host import SimHost


async def test_the_session_trusts_the_environment_only_where_it_names_a_proxy_or_a_netrc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = await SimHost.start(tmp_path / "kubeconfig")
    try:
        for name in kube_client.PROXY_VARIABLES:
            monkeypatch.delenv(name, raising=False)
            monkeypatch.delenv(name.upper(), raising=False)
        monkeypatch.setenv("HOME", str(tmp_path))  # (no ~/.netrc)
        kube = Kube(await kube_client.connect(host.kubeconfig))
        assert kube.api.rest_client.pool_manager.trust_env is False
        assert "items" in await kube.request("GET", NAMESPACES.path())  # (and it still talks)
        await kube.close()

        monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
        kube = Kube(await kube_client.connect(host.kubeconfig))
        assert kube.api.rest_client.pool_manager.trust_env is True
        await kube.close()

        monkeypatch.delenv("HTTPS_PROXY")
        (tmp_path / ".netrc").write_text("machine example.org login a password b\n")
        kube = Kube(await kube_client.connect(host.kubeconfig))
        assert kube.api.rest_client.pool_manager.trust_env is True
        await kube.close()
    finally:
        await host.stop()


async def test_a_call_carries_the_kubeconfig_token_as_it_is_now_its_query_and_its_json_body(tmp_path: Path) -> None:
    """Calls go on the client's own session, not through ``call_api``: what an API server sees must
    be what ``call_api`` sent (a real HTTP server records it)."""
    from aiohttp import web

    seen: list[tuple[str, str, str, str, bytes]] = []

    async def record(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.method, request.path_qs, request.headers.get("Authorization", ""),
                     request.headers.get("Content-Type", ""), body))  # fmt: skip
        return web.json_response({"kind": "Status", "ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    (tmp_path / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: first-token}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    kube = Kube(await kube_client.connect(tmp_path / "kubeconfig"))
    try:
        await kube.request("GET", NAMESPACES.path(), query={"limit": 5, "continue": None, "labelSelector": "a=b"})
        await kube.patch(
            kube_client.EVENTS, "ml", "e", [{"op": "remove", "path": "/x"}], content_type=kube_client.JSON_PATCH
        )
        kube.api.configuration.api_key["BearerToken"] = "Bearer rotated"  # (as a refresh hook sets it)
        await kube.create(kube_client.EVENTS, "ml", {"metadata": {"name": "e"}})
    finally:
        await kube.close()
        await runner.cleanup()
    assert seen[0][:3] == ("GET", "/api/v1/namespaces?limit=5&labelSelector=a%3Db", "Bearer first-token")
    assert seen[1][:4] == ("PATCH", "/api/v1/namespaces/ml/events/e", "Bearer first-token", kube_client.JSON_PATCH)
    assert json.loads(seen[1][4]) == [{"op": "remove", "path": "/x"}]
    assert seen[2][:4] == ("POST", "/api/v1/namespaces/ml/events", "Bearer rotated", "application/json")
    assert json.loads(seen[2][4]) == {"metadata": {"name": "e"}}


async def test_send_drops_the_answer_and_raises_a_refusal_as_request_does(tmp_path: Path) -> None:
    host = await SimHost.start(tmp_path / "kubeconfig")
    kube = Kube(await kube_client.connect(host.kubeconfig))
    try:
        await kube.create(NAMESPACES, None, {"metadata": {"name": "ml"}})
        path = kube_client.EVENTS.path("ml")
        event = {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ml"}}
        assert await kube.send("POST", path, body=event) is None
        assert (await kube.get(kube_client.EVENTS, "ml", "e"))["metadata"]["name"] == "e"
        with pytest.raises(kube_client.KubeError) as refused:
            await kube.send("POST", path, body=event)
        assert refused.value.status == 409 and not refused.value.temporary
    finally:
        await kube.close()
        await host.stop()


def test_json_the_fast_codec_refuses_is_read_as_the_standard_library_reads_it() -> None:
    assert kube_client.decode(b'{"a": "\\ud800", "b": [1, 2.5, null]}') == {"a": "\ud800", "b": [1, 2.5, None]}
    with pytest.raises(ValueError):
        kube_client.decode(b'{"a": ')
