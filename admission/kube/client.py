"""Raw JSON access to the Kubernetes API, configured by kubernetes_asyncio's ``ApiClient``.

The controller handles tens of thousands of jobs; kubernetes_asyncio's typed models cost far
more to build than the few fields it reads, and its ``call_api`` walks every body, header and
parameter through ``sanitize_for_serialization`` (a recursive copy, meant for those models) before
encoding it: a tenth of a busy controller's CPU. So calls here take the client's configuration
(host, TLS, proxy, and the bearer token asked for on every call, so a refreshed or rotated token is
used as ``call_api`` would) and send plain JSON dicts encoded once (read and written with
pydantic's Rust codec, ``pydantic_core``: the standard library's ``json`` took twice as long, and
every watch event and answer is one). Requests go on this package's own HTTP/1.1 connections
(``admission.kube.transport``: 40% less CPU per request than aiohttp); watches, and everything when a
proxy is configured, on the client's aiohttp session. Errors come back as one exception class,
``KubeError``, whose ``temporary`` says whether retrying can help (429, 5xx, connection failures)
or not (404, 409, 422: the caller must look again before acting).
"""

from __future__ import annotations

import functools
import json
import os
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pydantic_core
from kubernetes_asyncio import client, config

from admission.kube.transport import Answer, Transport

Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
WATCH_LINE_LIMIT = 16 * 1024 * 1024  # one watch event; Kubernetes objects are at most ~1.5 MiB


def decode(data: bytes) -> Any:
    """JSON as the API server sends it. ``pydantic_core`` refuses what the standard library reads (a
    lone surrogate escape, ``"\\ud800"``; Go's encoder never writes one, a Python server may): that
    is read the slow way rather than taken for a broken answer."""
    try:
        return pydantic_core.from_json(data)
    except ValueError:
        return json.loads(data)


class KubeError(Exception):
    """The API server refused a request (or could not be reached), as a ``kind: Status`` says."""

    def __init__(self, status: int, reason: str, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def temporary(self) -> bool:
        """Retrying the same request later may succeed: throttled, server error or no connection."""
        return self.status == 0 or self.status == 429 or self.status >= 500

    @classmethod
    def from_body(cls, status: int, data: bytes, headers: Mapping[str, str]) -> KubeError:
        try:
            body = decode(data)
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        retry = headers.get("Retry-After")
        message = str(body.get("message") or data[:200].decode(errors="replace"))
        return cls(
            status,
            str(body.get("reason") or "Unknown"),
            " ".join(message.split()),  # one line: a plain-text body ("404 page not found\n") too
            retry_after=float(retry) if retry and retry.isdigit() else None,
        )


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """Where a kind lives in the REST API: ``/api/v1/...`` for the core group, else ``/apis/GROUP/VERSION``."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        if namespace is not None and self.namespaced:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        if subresource is not None:
            base += f"/{subresource}"
        return base


NAMESPACES = ResourceRef("v1", "Namespace", "namespaces", namespaced=False)
EVENTS = ResourceRef("v1", "Event", "events")
CRDS = ResourceRef("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False)


async def connect(kubeconfig: Path | None = None) -> client.ApiClient:
    """An API client from ``kubeconfig``, else the in-cluster service account, else ``~/.kube/config``."""
    configuration = client.Configuration()
    if kubeconfig is not None:
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            await config.load_kube_config(client_configuration=configuration)
    api = client.ApiClient(configuration)
    _trust_environment_only_if_it_says_something(api)
    return api


PROXY_VARIABLES = ("http_proxy", "https_proxy", "ws_proxy", "wss_proxy", "all_proxy", "no_proxy", "netrc")


def _trust_environment_only_if_it_says_something(api: client.ApiClient) -> None:
    """kubernetes_asyncio's HTTP session trusts the environment: before every request aiohttp then
    looks, in a worker thread, for a proxy in the environment and for ``~/.netrc`` credentials,
    ~7 % of a busy controller's CPU and two thread hand-offs per call. Where no proxy variable is
    set and there is no ``~/.netrc`` there is nothing to find, so the session stops looking; a
    kubeconfig's ``proxy-url`` is unaffected (passed per request)."""
    if any(os.environ.get(v) or os.environ.get(v.upper()) for v in PROXY_VARIABLES):
        return
    if (Path.home() / ".netrc").exists():
        return
    session = getattr(api.rest_client, "pool_manager", None)
    if session is not None and hasattr(session, "_trust_env"):
        session._trust_env = False


class Kube:
    """JSON in, JSON out, over one ``ApiClient`` (its connection pool is shared by every caller)."""

    def __init__(self, api: client.ApiClient, *, timeout: float = 30.0) -> None:
        self.api = api
        self.timeout = aiohttp.ClientTimeout(total=timeout)  # each call's (a watch's: its own)
        # (method, HTTP status) -> answers: what this client's calls got back (``status 0``: no
        # answer). A controller in normal operation should see no 4xx here; /metrics exports it.
        self.answers: Counter[tuple[str, int]] = Counter()

    async def close(self) -> None:
        if isinstance(transport := self.__dict__.get("lean"), Transport):  # (made: see ``lean``)
            transport.close()
        await self.api.close()

    @functools.cached_property
    def lean(self) -> Transport | None:
        """The transport unary calls take (``admission.kube.transport``); None where aiohttp must
        carry them: a proxy (the kubeconfig's, or the environment's, which the session trusts then)."""
        rest = self.api.rest_client
        session = rest.pool_manager
        connector = session.connector
        context = getattr(connector, "_ssl", None)  # (the kubeconfig's: CA, client certificate)
        host = str(self.api.configuration.host)
        if rest.proxy or session.trust_env or connector is None:
            return None
        if host.startswith("https:") and not isinstance(context, ssl.SSLContext):
            return None
        try:
            return Transport(
                host,
                ssl_context=context if isinstance(context, ssl.SSLContext) else None,
                server_hostname=rest.server_hostname,
                limit=connector.limit or 0,  # (0: no limit, as aiohttp)
            )
        except ValueError:  # (a server URL it does not read: aiohttp says what is wrong with it)
            return None

    async def _prepared(
        self, method: str, path: str, query: Mapping[str, Any] | None, content_type: str
    ) -> tuple[dict[str, str], str]:
        """The headers (with the bearer token as it is now) and the path with its query."""
        api = self.api
        headers = {**api.default_headers, "Content-Type": content_type, "Accept": "application/json"}
        if api.cookie:
            headers["Cookie"] = api.cookie
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        await api.update_params_for_auth(headers, params, ["BearerToken"])
        return headers, path + (f"?{urlencode(params)}" if params else "")

    async def _exchange(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        expected: tuple[int, ...] = (),
    ) -> Answer:
        """One call, its answer read whole; ``KubeError`` for a failure status. ``expected``: statuses
        that are an answer, not a failure (a kind not installed: 404), not counted in ``answers``."""
        data = pydantic_core.to_json(body) if body is not None else None
        try:
            headers, target = await self._prepared(method, path, query, content_type)
            if (transport := self.lean) is not None:
                answer = await transport.request(method, target, headers, data, timeout=self.timeout.total)
            else:
                answer = await self._aiohttp(method, target, headers, data)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise self._unreachable(method, f"{method} {path}", exc) from exc
        if answer.status not in expected:
            self.answers[(method, answer.status)] += 1
        if answer.status >= 400:
            raise KubeError.from_body(answer.status, answer.body, answer.headers)
        return answer

    def _unreachable(self, method: str, what: str, exc: BaseException) -> KubeError:
        """A call that got no answer: counted under status 0, a temporary ``KubeError``."""
        self.answers[(method, 0)] += 1
        return KubeError(0, "Unreachable", f"{what}: {exc!r}")

    async def _aiohttp(self, method: str, target: str, headers: dict[str, str], data: bytes | None) -> Answer:
        response = await self._open(method, target, headers, data, self.timeout)
        try:
            return Answer(int(response.status), response.headers, await response.read())
        finally:
            response.release()

    async def _open(
        self, method: str, target: str, headers: dict[str, str], data: bytes | None, timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        """A call on the ``ApiClient``'s aiohttp session (its proxy, its TLS), the answer not yet read."""
        rest = self.api.rest_client
        args: dict[str, Any] = {"headers": headers, "timeout": timeout, "data": data}
        if rest.proxy:
            args["proxy"], args["proxy_headers"] = rest.proxy, rest.proxy_headers
        if rest.server_hostname:
            args["server_hostname"] = rest.server_hostname
        response: aiohttp.ClientResponse = await rest.pool_manager.request(
            method, f"{self.api.configuration.host}{target}", **args
        )
        return response

    def refused(self) -> int:
        """How many of this client's calls the API server refused (4xx)."""
        return sum(n for (_, status), n in self.answers.items() if 400 <= status < 500)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        expected: tuple[int, ...] = (),
    ) -> Obj:
        """One request; the decoded JSON answer, or ``KubeError`` (``expected``: see ``_exchange``)."""
        answer = await self._exchange(
            method, path, query=query, body=body, content_type=content_type, expected=expected
        )
        decoded = decode(answer.body) if answer.body else {}
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    async def send(self, method: str, path: str, *, body: Any, content_type: str = "application/json") -> None:
        """One request whose answer the caller does not read (a status patch whose outcome it knows,
        an Event): the body is dropped unparsed; failures raised as ``request`` raises them."""
        await self._exchange(method, path, body=body, content_type=content_type)

    async def get(self, ref: ResourceRef, namespace: str | None, name: str) -> Obj:
        return await self.request("GET", ref.path(namespace, name))

    async def create(self, ref: ResourceRef, namespace: str | None, obj: Obj) -> Obj:
        return await self.request("POST", ref.path(namespace), body=obj)

    async def delete(self, ref: ResourceRef, namespace: str | None, name: str) -> Obj:
        return await self.request("DELETE", ref.path(namespace, name))

    async def patch(
        self, ref: ResourceRef, namespace: str | None, name: str, patch: Any, *, content_type: str = MERGE_PATCH
    ) -> Obj:
        return await self.request("PATCH", ref.path(namespace, name), body=patch, content_type=content_type)

    async def list_pages(
        self,
        ref: ResourceRef,
        *,
        label_selector: str | None = None,
        page: int = 500,
        expected: tuple[int, ...] = (),
    ) -> AsyncIterator[Obj]:
        """Every page of a cluster-wide list, following ``continue`` tokens."""
        token: str | None = None
        while True:
            answer = await self.request(
                "GET",
                ref.path(),
                query={"limit": page, "continue": token, "labelSelector": label_selector},
                expected=expected,
            )
            yield answer
            token = (answer.get("metadata") or {}).get("continue") or None
            if not token:
                return

    async def watch(
        self,
        ref: ResourceRef,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
    ) -> AsyncIterator[Obj]:
        """Watch events from ``resource_version``, with bookmarks, until the server ends the stream.

        Events are read in chunks and split on newlines, so no object is too long for a line
        buffer. A ``410 Gone`` arrives as an ``ERROR`` event: it is raised as ``KubeError(410)``.
        """
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
            "labelSelector": label_selector,
        }
        try:
            headers, target = await self._prepared("GET", ref.path(), query, "application/json")
            response = await self._open(
                "GET", target, headers, None, aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30)
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise self._unreachable("GET", f"watch of {ref.plural}", exc) from exc
        self.answers[("GET", int(response.status))] += 1
        try:
            if response.status >= 400:
                raise KubeError.from_body(response.status, await response.read(), response.headers)
            buffer = b""
            try:
                async for chunk in response.content.iter_any():
                    buffer += chunk
                    if len(buffer) > WATCH_LINE_LIMIT:
                        raise KubeError(0, "WatchLineTooLong", f"watch of {ref.plural}: an event over 16 MiB")
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield _watch_event(decode(line))
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise KubeError(0, "Unreachable", f"watch of {ref.plural} broke: {exc!r}") from exc
        finally:
            response.release()


def _watch_event(event: Obj) -> Obj:
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise KubeError(int(status.get("code") or 500), str(status.get("reason")), str(status.get("message")))
    return event
