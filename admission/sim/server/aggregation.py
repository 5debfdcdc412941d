"""API aggregation, as the real API server's aggregator (kube-aggregator) does it.

An ``APIService`` (``apiregistration.k8s.io/v1``) named ``VERSION.GROUP`` with a ``service``
reference claims that group version: every request under ``/apis/GROUP/VERSION`` (discovery
included) is proxied to the service over TLS, the backend's certificate verified against the
APIService's ``caBundle`` for the name ``SERVICE.NAMESPACE.svc`` (unless
``insecureSkipTLSVerify``), presenting the *front-proxy* client certificate (``CN=front-proxy-client``,
signed by the requestheader CA) and naming the requesting user in ``X-Remote-User`` and
``X-Remote-Group``; the ``Authorization`` header is not passed on. The requestheader settings are
published in ``kube-system/extension-apiserver-authentication``, as the real server publishes
them, for backends to trust the headers. The group is listed in ``/apis``.

A backend that cannot be reached answers ``503 ServiceUnavailable`` ("the server is currently
unable to handle the request"), and only for its group: kubectl then warns that it could not get
that group's resource list and carries on with the rest, as with a real cluster.

The simulated cluster has no service network: ``services`` maps ``namespace/name:port`` to a
local ``https://host:port`` (the same map the webhooks use). Watches are not proxied.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import ApiError, Obj, Resource
from admission.sim.server.resources import API_SERVICES
from admission.webhook import certs

CONFIG_MAP = Resource("", "v1", "configmaps", "ConfigMap", has_status=False, short_names=("cm",))
AUTHENTICATION = ("kube-system", "extension-apiserver-authentication")
FRONT_PROXY_CN = "front-proxy-client"
UNAVAILABLE = "the server is currently unable to handle the request"
HOP_HEADERS = {"Accept", "Content-Type"}


class Aggregator:
    def __init__(self, store: ObjectStore, services: dict[str, str]) -> None:
        self.store = store
        self.services = services
        self.folder = Path(tempfile.mkdtemp(prefix="turnstile-sim-front-proxy-"))
        ca_crt, ca_key = certs.new_ca()
        crt, key = certs.sign(ca_crt, ca_key, [FRONT_PROXY_CN], client=True)
        (self.folder / "client.crt").write_bytes(crt)
        (self.folder / "client.key").write_bytes(key)
        self.folder.joinpath("client.key").chmod(0o600)
        self.ca = ca_crt
        self._session: aiohttp.ClientSession | None = None
        self.proxied = 0

    def publish(self, namespaces: Resource) -> None:
        """``kube-system/extension-apiserver-authentication``: the requestheader settings."""
        namespace, name = AUTHENTICATION
        data = {
            "requestheader-client-ca-file": self.ca.decode(),
            "requestheader-allowed-names": json.dumps([FRONT_PROXY_CN]),
            "requestheader-username-headers": json.dumps(["X-Remote-User"]),
            "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
            "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"]),
        }
        self.store.create(CONFIG_MAP, namespace, {"metadata": {"name": name, "namespace": namespace}, "data": data},
                          namespaces=namespaces)  # fmt: skip

    async def close(self) -> None:
        """The proxy's connections closed and its client certificate's folder removed."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def claimed(self, group: str, version: str) -> Obj | None:
        """The APIService that claims ``group/version`` for a backend, if any."""
        if not group:
            return None
        try:
            found = self.store.get(API_SERVICES, "", f"{version}.{group}")
        except ApiError:
            return None
        return found if (found.get("spec") or {}).get("service") else None

    def groups(self) -> list[tuple[str, str]]:
        """(group, version) of every APIService with a backend, for ``/apis``."""
        out = []
        for svc in self.store.list(API_SERVICES, None)[0]:
            spec = svc.get("spec") or {}
            if spec.get("service") and spec.get("group") and spec.get("version"):
                out.append((str(spec["group"]), str(spec["version"])))
        return out

    def _context(self, spec: Obj) -> ssl.SSLContext:
        if spec.get("insecureSkipTLSVerify"):
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            bundle = spec.get("caBundle")
            if not bundle:
                raise ConnectionError("the APIService has no caBundle and does not skip TLS verification")
            context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
        context.load_cert_chain(self.folder / "client.crt", self.folder / "client.key")
        return context

    async def proxy(self, request: web.Request, api_service: Obj, user: dict[str, Any]) -> web.StreamResponse:
        spec = api_service.get("spec") or {}
        svc = spec.get("service") or {}
        key = f"{svc.get('namespace')}/{svc.get('name')}:{svc.get('port', 443)}"
        base = self.services.get(key)
        name = api_service["metadata"]["name"]
        if base is None:
            raise ApiError(503, "ServiceUnavailable", f"{UNAVAILABLE} (no endpoints for service {key})")
        headers: list[tuple[str, str]] = [(h, v) for h, v in request.headers.items() if h in HOP_HEADERS]
        headers.append(("X-Remote-User", str(user.get("username") or "")))
        headers += [("X-Remote-Group", str(g)) for g in user.get("groups") or []]
        url = base.rstrip("/") + request.rel_url.path_qs
        try:
            context = self._context(spec)
            if self._session is None or self._session.closed:
                self._session = aiohttp.ClientSession()
            body = await request.read()
            async with self._session.request(
                request.method,
                url,
                data=body or None,
                headers=headers,
                ssl=context,
                server_hostname=f"{svc.get('name')}.{svc.get('namespace')}.svc",
                timeout=aiohttp.ClientTimeout(total=30),
            ) as resp:
                payload = await resp.read()
                self.proxied += 1
                return web.Response(body=payload, status=resp.status, content_type=resp.content_type)
        except (aiohttp.ClientError, ConnectionError, ssl.SSLError, TimeoutError, OSError) as exc:
            raise ApiError(
                503, "ServiceUnavailable", f'{UNAVAILABLE} (APIService "{name}": error trying to reach service: {exc})'
            ) from None
