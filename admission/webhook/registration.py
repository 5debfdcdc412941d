"""Publishing Turnstile's webhook configurations and keeping them so (``Registration``).

Every replica publishes the configurations ``admission.webhook.configurations`` renders (the
webhooks' scope, failure policies, the APIServices), repairs them when someone changes them, and
labels the namespaces with the scope the leader decides (``turnstile.dev/webhook``).

**CA bundle.** Every replica makes sure the published ``caBundle`` trusts the certificate it
serves: the bundle is the union of the CAs already published (expired ones dropped) and this
replica's, so replicas that each issued their own CA (``--cert-dir`` without a shared Secret)
never lock each other out, and a replica that exits leaves the others trusted. Readiness
includes it (``trusted``): a replica the API server would not trust is not ready.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import logging
from collections.abc import Collection

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError, Obj
from admission.webhook.configurations import (
    API_SERVICES,
    HOOKS,
    PLURALS,
    QUEUE_OBJECT_SCOPES,
    SCOPE_LABEL,
    Scope,
    match_conditions,
    namespace_selector,
)
from queues.podsets import jobs

log = logging.getLogger(__name__)

MAX_CAS = 8  # CAs kept in a bundle (the newest), so replicas coming and going never grow it without end
SYNC_SECONDS = 60.0  # the published configurations are checked (and repaired) this often


def merged_bundle(published: str | None, ours: bytes, now: dt.datetime | None = None) -> bytes:
    """Our CAs plus the published ones still valid, newest first, at most ``MAX_CAS``, each once."""
    now = now or dt.datetime.now(dt.UTC)
    found: dict[bytes, x509.Certificate] = {}
    for pem in (ours, base64.b64decode(published) if published else b""):
        try:
            certs = x509.load_pem_x509_certificates(pem) if pem.strip() else []
        except ValueError:
            continue  # a damaged bundle: ours replaces it
        for cert in certs:
            if cert.not_valid_after_utc > now:
                found.setdefault(cert.fingerprint(hashes.SHA256()), cert)
    mine = {c.fingerprint(hashes.SHA256()) for c in x509.load_pem_x509_certificates(ours)}
    ordered = sorted(found.items(), key=lambda kv: (kv[0] not in mine, -kv[1].not_valid_before_utc.timestamp()))
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for _, c in ordered[:MAX_CAS])


def trusts(published: str | None, ours: bytes) -> bool:
    """Whether a published ``caBundle`` holds every CA of ``ours`` (the first signs our certificate)."""
    if not published:
        return False
    try:
        have = {c.tbs_certificate_bytes for c in x509.load_pem_x509_certificates(base64.b64decode(published))}
        first = x509.load_pem_x509_certificates(ours)[0]
    except ValueError:
        return False
    return first.tbs_certificate_bytes in have


class Registration:
    """Keeps both configurations' CA bundle and selectors (every replica) and the namespaces'
    ``turnstile.dev/webhook`` labels (the leader) as they should be."""

    def __init__(
        self,
        kube: Kube,
        *,
        own_namespace: str = "turnstile-system",
        owners: Collection[tuple[str, str]] = frozenset(jobs.KINDS),
    ) -> None:
        self.kube = kube
        self.own_namespace = own_namespace
        self.owners = owners  # the enabled integrations' kinds: whose children the hooks leave to them
        self.ca: bytes | None = None  # the CA bundle this replica serves under
        self.scope: Scope | None = None  # set while leading: the scope to keep
        self.registered: bool | None = None  # None: not looked yet; False: no configuration exists
        self.trusted_by: set[str] = set()  # configurations whose bundle trusts our CA
        self.missing_said: set[str] = set()
        self.poke = asyncio.Event()

    def serve_with(self, ca: bytes) -> None:
        self.ca = ca
        self.trusted_by.clear()
        self.poke.set()

    def keep_scope(self, scope: Scope | None) -> None:
        if scope != self.scope:
            self.scope = scope
            self.poke.set()

    def trusted(self) -> str | None:
        """Readiness: None when the API server would trust this replica (or calls no webhook here)."""
        if self.registered is False:
            return None  # no configurations in the cluster: nothing calls us
        if self.registered is None:
            return "webhook configurations not checked yet"
        untrusted = sorted(set(PLURALS) - self.trusted_by)
        return (
            f"the published caBundle of {', '.join(untrusted)} does not trust this replica's CA" if untrusted else None
        )

    async def keep(self, every: float = SYNC_SECONDS) -> None:
        backoff = 1.0
        while True:
            try:
                await self.sync()
                backoff = 1.0
                wait = every
            except KubeError as exc:
                log.warning("webhook configurations: %s; trying again in %.0fs", exc, backoff)
                wait, backoff = backoff, min(every, backoff * 2)
            self.poke.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self.poke.wait()

    async def sync(self) -> None:
        """Read both configurations and patch what differs from what they should be."""
        found = 0
        for name, plural in PLURALS.items():
            path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}"
            try:
                current = await self.kube.request("GET", path)
            except KubeError as exc:
                if exc.status == 404:
                    self.trusted_by.discard(name)
                    continue
                raise
            found += 1
            patch = self._patch(name, current)
            if patch:
                current = await self.kube.request("PATCH", path, body=patch, content_type=kube_client.JSON_PATCH)
            hooks = current.get("webhooks") or []
            if (
                self.ca is not None
                and hooks
                and all(trusts((h.get("clientConfig") or {}).get("caBundle"), self.ca) for h in hooks)
            ):
                self.trusted_by.add(name)
            else:
                self.trusted_by.discard(name)
        self.registered = found > 0
        await self._api_services()
        if self.scope is not None:
            await self._label_namespaces(self.scope)

    async def _label_namespaces(self, scope: Scope) -> None:
        """Give each namespace the ``turnstile.dev/webhook`` label its scope asks for (or none).
        A merge patch of that one label: other labels, and anything GitOps applies, stay."""
        async for page in self.kube.list_pages(kube_client.NAMESPACES):
            for ns in page.get("items") or []:
                meta = ns.get("metadata") or {}
                name, labels = str(meta.get("name")), dict(meta.get("labels") or {})
                wanted = scope.label(name, labels, self.own_namespace)
                if labels.get(SCOPE_LABEL) == wanted:
                    continue
                log.info(
                    "namespace %s: %s=%s (which of its unlabelled objects the webhooks see)", name, SCOPE_LABEL, wanted
                )
                patch = {"metadata": {"labels": {SCOPE_LABEL: wanted}}}
                try:
                    await self.kube.patch(kube_client.NAMESPACES, None, name, patch)  # (a merge patch)
                except KubeError as exc:
                    if exc.status != 404:  # (deleted meanwhile)
                        raise

    async def _api_services(self) -> None:
        """The APIServices that route to this port trust our CA too (absent ones are left alone)."""
        if self.ca is None:
            return
        for name in API_SERVICES:
            path = f"/apis/apiregistration.k8s.io/v1/apiservices/{name}"
            try:
                current = await self.kube.request("GET", path)
            except KubeError as exc:
                if exc.status in (403, 404):
                    continue
                raise
            published = (current.get("spec") or {}).get("caBundle")
            if not trusts(published, self.ca):
                bundle = base64.b64encode(merged_bundle(published, self.ca)).decode()
                log.info("updating the caBundle of APIService %s", name)
                patch = {"spec": {"caBundle": bundle}}
                await self.kube.request("PATCH", path, body=patch, content_type=kube_client.MERGE_PATCH)

    def _patch(self, name: str, current: Obj) -> list[Obj]:
        """JSON patch ops that make ``current`` carry our CA and the fixed selectors. Each
        change is guarded by a ``test`` of the webhook's name at its index, so a configuration
        edited meanwhile is refused (422) rather than patched in the wrong place."""
        ops: list[Obj] = []
        hooks = current.get("webhooks") or []
        present = set()
        for i, hook in enumerate(hooks):
            hook_name = str(hook.get("name"))
            present.add(hook_name)
            changes: list[Obj] = []
            if self.ca is not None:
                published = (hook.get("clientConfig") or {}).get("caBundle")
                if not trusts(published, self.ca):
                    bundle = base64.b64encode(merged_bundle(published, self.ca)).decode()
                    changes.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle})
            spec = HOOKS.get(hook_name)
            if spec is not None and spec[2] not in QUEUE_OBJECT_SCOPES:  # (an older install's, or edited by hand)
                for field, value in (
                    ("namespaceSelector", namespace_selector(spec[2], self.own_namespace)),
                    ("matchConditions", match_conditions(spec[2], self.owners)),
                ):
                    if hook.get(field) != value:
                        changes.append({"op": "add", "path": f"/webhooks/{i}/{field}", "value": value})
            if changes:
                ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook_name})
                ops.extend(changes)
        expected = {n for n, spec in HOOKS.items() if spec[0] == name}
        missing = sorted(expected - present - self.missing_said)
        if missing:
            log.warning(
                "webhook configuration %s has no webhook %s: apply the current manifests (kubectl apply -k manifests/)",
                name,
                ", ".join(missing),
            )
            self.missing_said.update(missing)
        if ops:
            log.info("updating webhook configuration %s (CA bundle or selectors)", name)
        return ops
