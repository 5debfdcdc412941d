"""The client's own HTTP/1.1 transport against real HTTP servers (aiohttp's, and a bare asyncio one
for what aiohttp's server never does): every way an answer can be framed, keep-alive and its end,
TLS with the kubeconfig's CA and client certificate, failures as ``KubeError(0)``."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError
from admission.kube.transport import Transport
from admission.webhook import certs

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def _server(handler: Handler, context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def _framed(request: web.Request) -> web.StreamResponse:
    """Echoes the method, body and headers; framed as the path asks."""
    body = await request.read()
    payload = b'{"method": "%s", "body": %s, "host": "%s"}' % (
        request.method.encode(),
        body or b"null",
        request.headers["Host"].encode(),
    )
    if request.path.endswith("/chunked"):
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(0, len(payload), 7):  # (many small chunks)
            await response.write(payload[i : i + 7])
        await response.write_eof()
        return response
    if request.path.endswith("/close"):
        return web.Response(body=payload, content_type="application/json", headers={"Connection": "close"})
    if request.path.endswith("/empty"):
        return web.Response(status=204)
    if request.path.endswith("/refused"):
        return web.json_response({"kind": "Status", "reason": "Conflict", "message": "taken"}, status=409)
    return web.Response(body=payload, content_type="application/json")


async def test_answers_framed_every_way_and_connections_kept_only_while_the_server_keeps_them() -> None:
    async with _server(_framed) as port:
        transport = Transport(f"http://127.0.0.1:{port}/prefix", ssl_context=None)
        try:
            answer = await transport.request("PATCH", "/sized", {"X": "1"}, b'{"a": 1}', timeout=5)
            assert answer.status == 200 and answer.headers["content-type"].startswith("application/json")
            assert kube_client.decode(answer.body) == {"method": "PATCH", "body": {"a": 1}, "host": f"127.0.0.1:{port}"}
            assert len(transport.idle) == 1
            kept = transport.idle[0]

            answer = await transport.request("POST", "/chunked", {}, b'{"big": "' + b"x" * 5000 + b'"}', timeout=5)
            assert kube_client.decode(answer.body)["body"] == {"big": "x" * 5000}
            assert transport.idle == [kept], "the same connection carried the chunked answer and stays"

            assert (await transport.request("DELETE", "/empty", {}, None, timeout=5)).body == b""
            answer = await transport.request("GET", "/refused", {}, None, timeout=5)
            assert answer.status == 409 and kube_client.decode(answer.body)["reason"] == "Conflict"

            answer = await transport.request("GET", "/close", {}, None, timeout=5)
            assert kube_client.decode(answer.body)["method"] == "GET"
            assert transport.idle == [], "Connection: close: not reused"
            assert kept.closed
        finally:
            transport.close()


async def test_a_connection_the_server_closed_while_idle_is_not_used_again() -> None:
    async with _server(_framed) as port:
        transport = Transport(f"http://127.0.0.1:{port}", ssl_context=None)
        await transport.request("GET", "/a", {}, None, timeout=5)
        first = transport.idle[0]
    async with _server(_framed) as port_again:  # (the first server is gone: it closed every connection)
        await asyncio.sleep(0.05)
        assert first.closed
        transport.port = port_again
        assert (await transport.request("GET", "/b", {}, None, timeout=5)).status == 200
        assert transport.idle and transport.idle[0] is not first
        transport.close()


@asynccontextmanager
async def _raw_server(answer: bytes, *, then_close: bool = False, silent: bool = False) -> AsyncIterator[int]:
    """A server that reads one request and writes ``answer`` as given (what aiohttp's never sends)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if silent:
            await asyncio.sleep(10)
        writer.write(answer)
        await writer.drain()
        if then_close:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def test_informational_answers_trailers_and_an_answer_running_to_the_connections_end() -> None:
    chunked = b'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\n{"a\r\n4\r\n": 1\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n'
    async with _raw_server(chunked) as port:
        transport = Transport(f"http://127.0.0.1:{port}", ssl_context=None)
        answer = await transport.request("GET", "/", {}, None, timeout=5)
        assert answer.status == 200 and kube_client.decode(answer.body) == {"a": 1}
        transport.close()
    async with _raw_server(
        b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"to": "the end"}', then_close=True
    ) as port:
        transport = Transport(f"http://127.0.0.1:{port}", ssl_context=None)
        answer = await transport.request("GET", "/", {}, None, timeout=5)
        assert kube_client.decode(answer.body) == {"to": "the end"} and transport.idle == []


async def test_a_broken_or_silent_server_is_a_temporary_kube_error(tmp_path: Path) -> None:
    async with _raw_server(b'HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"cut', then_close=True) as port:
        transport = Transport(f"http://127.0.0.1:{port}", ssl_context=None)
        with pytest.raises(ConnectionError):
            await transport.request("GET", "/", {}, None, timeout=5)
        assert transport.idle == []
    async with _raw_server(b"nonsense\r\n\r\n") as port:
        transport = Transport(f"http://127.0.0.1:{port}", ssl_context=None)
        with pytest.raises(ConnectionError, match=r"not HTTP/1\.1"):
            await transport.request("GET", "/", {}, None, timeout=5)
    async with _raw_server(b"", silent=True) as port:
        (tmp_path / "kubeconfig").write_text(_kubeconfig(f"http://127.0.0.1:{port}"))
        kube = Kube(await kube_client.connect(tmp_path / "kubeconfig"), timeout=0.3)
        try:
            assert isinstance(kube.lean, Transport)
            with pytest.raises(KubeError) as failed:
                await kube.request("GET", "/api/v1/namespaces")
            assert failed.value.status == 0 and failed.value.temporary
            assert kube.answers[("GET", 0)] == 1 and kube.lean.idle == []
        finally:
            await kube.close()


def _kubeconfig(server: str, user: str = "{token: t}", cluster_extra: str = "") -> str:
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'{cluster_extra}}}}}]\n"
        f"users: [{{name: u, user: {user}}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )


async def test_tls_with_the_kubeconfigs_ca_and_client_certificate(tmp_path: Path) -> None:
    bundle = certs.issue(tmp_path / "server", ["127.0.0.1"])
    client_crt, client_key = certs.sign(bundle.ca_crt, bundle.ca_key, ["turnstile"], client=True)
    context = bundle.server_context(tmp_path / "server")
    context.verify_mode = ssl.CERT_REQUIRED  # (as an API server asking for client certificates)
    context.load_verify_locations(cadata=bundle.ca_crt.decode())
    seen: list[str] = []

    async def who(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        seen.append(dict(x[0] for x in peer["subject"])["commonName"] if peer else "")
        return web.json_response({"kind": "NamespaceList", "items": [], "auth": request.headers.get("Authorization")})

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    async with _server(who, context) as port:
        (tmp_path / "kubeconfig").write_text(
            _kubeconfig(
                f"https://127.0.0.1:{port}",
                user=f"{{client-certificate-data: {b64(client_crt)}, client-key-data: {b64(client_key)}, token: t}}",
                cluster_extra=f", certificate-authority-data: {b64(bundle.ca_crt)}",
            )
        )
        kube = Kube(await kube_client.connect(tmp_path / "kubeconfig"))
        try:
            assert isinstance(kube.lean, Transport), "an https kubeconfig without a proxy takes the transport"
            answer = await kube.request("GET", "/api/v1/namespaces")
            assert answer["auth"] == "Bearer t" and seen == ["turnstile"]
        finally:
            await kube.close()

        (tmp_path / "other").mkdir()
        (tmp_path / "kubeconfig").write_text(  # a CA that did not sign the server's certificate
            _kubeconfig(
                f"https://127.0.0.1:{port}",
                cluster_extra=f", certificate-authority-data: {b64(certs.new_ca()[0])}",
            )
        )
        kube = Kube(await kube_client.connect(tmp_path / "kubeconfig"))
        try:
            with pytest.raises(KubeError) as refused:
                await kube.request("GET", "/api/v1/namespaces")
            assert refused.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in refused.value.message
        finally:
            await kube.close()


async def test_a_proxy_leaves_every_call_to_aiohttp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kubeconfig").write_text(
        _kubeconfig("http://127.0.0.1:1", cluster_extra=", proxy-url: 'http://127.0.0.1:2'")
    )
    kube = Kube(await kube_client.connect(tmp_path / "kubeconfig"))
    assert kube.api.rest_client.proxy and kube.lean is None
    await kube.close()
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    (tmp_path / "kubeconfig").write_text(_kubeconfig("http://127.0.0.1:1"))
    kube = Kube(await kube_client.connect(tmp_path / "kubeconfig"))
    assert kube.lean is None, "the environment names a proxy: aiohttp's session finds it"
    await kube.close()


def test_a_url_it_cannot_serve_is_refused_where_the_transport_is_made() -> None:
    for url in ("ftp://k8s.example", "https://", "http://k8s.example:port"):
        with pytest.raises(ValueError):
            Transport(url, ssl_context=None)
    with pytest.raises(ValueError, match="TLS context"):
        Transport("https://k8s.example", ssl_context=None)  # (never plain TCP to an https server)
    transport = Transport("http://[::1]:6443/prefix/", ssl_context=None)
    assert (transport.hostname, transport.port, transport.prefix, transport.host_header) == (
        "::1",
        6443,
        "/prefix",
        "[::1]:6443",
    )


async def test_an_idle_connection_that_was_told_something_unasked_is_not_used_again() -> None:
    async with _server(_framed) as port:
        transport = Transport(f"http://127.0.0.1:{port}", ssl_context=None)
        await transport.request("GET", "/a", {}, None, timeout=5)
        told = transport.idle[0]
        told.data_received(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")  # (as a proxy says it)
        answer = await transport.request("GET", "/b", {}, None, timeout=5)
        assert answer.status == 200 and told.closed and transport.idle[0] is not told
        transport.close()
