"""Who asks, and may they: delegated authentication and authorization, as every aggregated API server.

The API server (its aggregator) proxies a request for an APIService's group to the backend over
TLS, presenting its *front-proxy* client certificate, and names the user it authenticated in
``X-Remote-User`` / ``X-Remote-Group`` headers. A backend may believe those headers only from a
client certificate signed by the *requestheader* CA and whose common name is one of the allowed
names; both are published by the API server in the ConfigMap
``kube-system/extension-apiserver-authentication`` (read with the standard
``extension-apiserver-authentication-reader`` Role). Anything else is anonymous and refused (401).

Authorization is the API server's too: a SubjectAccessReview for (user, groups, verb, group,
resource, subresource, namespace, name), so Kubernetes RBAC decides who reads which namespace's
workloads, exactly as for any built-in resource. Answers are cached for ``CACHE_SECONDS``
(``kubectl get -A`` pages 100,000 workloads in 200 requests, one review).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from admission.kube.client import Kube, KubeError

log = logging.getLogger(__name__)

CONFIG_MAP = ("kube-system", "extension-apiserver-authentication")
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
CACHE_SECONDS = 10.0
RELOAD_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The API server's requestheader settings (``--requestheader-*``)."""

    ca: str  # PEM of the CA that signs the front-proxy client certificate
    allowed_names: tuple[str, ...] = ()  # empty: any certificate that CA signed
    user_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)


@dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...] = ()


def _list(data: dict[str, Any], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = data.get(key)
    if not raw:
        return default
    try:
        values = json.loads(raw)
    except ValueError:
        return default
    return tuple(str(v) for v in values) if isinstance(values, list) else default


class FrontProxy:
    """Trusts the API server's front-proxy headers, and nothing else."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.config: RequestHeader | None = None
        self.said_missing = False

    async def load(self, context: ssl.SSLContext) -> bool:
        """Read the requestheader settings and trust their CA for client certificates on ``context``
        (the webhook's: API server calls to webhooks present none, so both share the port)."""
        namespace, name = CONFIG_MAP
        try:
            found = await self.kube.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except KubeError as exc:
            if not self.said_missing:
                log.warning(
                    "the aggregated API (kubectl get workloads) is unavailable: cannot read %s/%s (%s); "
                    "bind the Role extension-apiserver-authentication-reader",
                    namespace,
                    name,
                    exc,
                )
                self.said_missing = True
            return False
        data = found.get("data") or {}
        ca = str(data.get("requestheader-client-ca-file") or "")
        if not ca.strip():
            if not self.said_missing:
                log.warning("the API server publishes no requestheader-client-ca-file: API aggregation is off there")
                self.said_missing = True
            return False
        config = RequestHeader(
            ca=ca,
            allowed_names=_list(data, "requestheader-allowed-names", ()),
            user_headers=_list(data, "requestheader-username-headers", ("X-Remote-User",)),
            group_headers=_list(data, "requestheader-group-headers", ("X-Remote-Group",)),
        )
        if config != self.config:
            context.verify_mode = ssl.CERT_OPTIONAL
            context.load_verify_locations(cadata=ca)
            self.config = config
        return True

    async def keep(self, context: ssl.SSLContext) -> None:
        while True:
            with contextlib.suppress(OSError, ssl.SSLError, ValueError):
                await self.load(context)
            await asyncio.sleep(RELOAD_SECONDS if self.config else 10.0)

    def user(self, request: web.Request) -> User | None:
        """The user the API server vouches for, or None (not proxied by it: anonymous)."""
        config = self.config
        cert = request.transport.get_extra_info("peercert") if request.transport is not None else None
        if config is None or not cert:
            return None  # no verified client certificate (the TLS handshake checked the CA)
        names = {v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"}
        if config.allowed_names and not names & set(config.allowed_names):
            return None
        name = next((request.headers[h] for h in config.user_headers if request.headers.get(h)), "")
        if not name:
            return None
        groups = tuple(g for h in config.group_headers for g in request.headers.getall(h, []))
        return User(name, groups)


@dataclass(frozen=True, slots=True)
class Access:
    verb: str
    group: str
    resource: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""

    def denial(self, user: User) -> str:
        """Kubernetes' own wording of a 403."""
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        target = f'{self.resource}.{self.group} "{self.name}"' if self.name else f"{self.resource}.{self.group}"
        scope = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return (
            f'{target} is forbidden: User "{user.name}" cannot {self.verb} resource "{what}" in API group '
            f'"{self.group}" {scope}'
        )


@dataclass
class Authorizer:
    """SubjectAccessReviews, cached."""

    kube: Kube
    cache: dict[tuple[User, Access], tuple[float, bool]] = field(default_factory=dict)

    async def allowed(self, user: User, access: Access) -> bool:
        key = (user, access)
        hit = self.cache.get(key)
        now = time.monotonic()
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
        attributes = {k: v for k, v in (
            ("verb", access.verb), ("group", access.group), ("resource", access.resource),
            ("namespace", access.namespace), ("name", access.name), ("subresource", access.subresource),
        ) if v}  # fmt: skip
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user.name, "groups": list(user.groups), "resourceAttributes": attributes},
        }
        answer = await self.kube.request("POST", SAR_PATH, body=review)
        ok = bool((answer.get("status") or {}).get("allowed"))
        if len(self.cache) > 10_000:
            self.cache.clear()
        self.cache[key] = (now, ok)
        return ok
