"""Admission webhooks, called as the real API server calls them.

On CREATE/UPDATE/DELETE of an object, every MutatingWebhookConfiguration's webhooks whose rules,
namespaceSelector and objectSelector match are called in name order over HTTPS (the server
certificate verified against ``clientConfig.caBundle``), and their JSON patches applied; then
every matching ValidatingWebhookConfiguration's webhooks. A denial becomes a ``Status`` error
(code 400 unless the webhook sets one); an unreachable or broken webhook fails the request when
``failurePolicy`` is Fail (the default) and is skipped when it is Ignore. A webhook's
``matchConditions`` (CEL over ``object``, ``oldObject`` and ``request``) must all hold for it to be
called; one that cannot be evaluated fails the request under Fail and skips the webhook under
Ignore, as the real server does (without cel-python they are not evaluated: the webhook is
called). Warnings come back as ``Warning`` headers. ``services`` maps ``namespace/name:port`` of a
service reference to a local ``https://host:port`` (the simulated cluster has no service network).
"""

from __future__ import annotations

import base64
import json
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from admission.sim.server import patches
from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import ApiError, Obj, Resource, parse_label_selector
from admission.sim.server.resources import NAMESPACES
from admission.sim.server.schema import cel

# One review's matchCondition work: "" -> the CEL variables (``cel.activation``), an expression -> its result
Memo = dict[str, Any]

MUTATING = "mutatingwebhookconfigurations"
ADMIN: Obj = {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]}
VALIDATING = "validatingwebhookconfigurations"


@dataclass
class Outcome:
    obj: Obj
    warnings: list[str] = field(default_factory=list)


def _matches_rule(rules: list[Obj], res: Resource, operation: str, sub: str) -> bool:
    name = f"{res.plural}/{sub}" if sub else res.plural
    for rule in rules:
        if not any(o in ("*", operation) for o in rule.get("operations", [])):
            continue
        if not any(g in ("*", res.group) for g in rule.get("apiGroups", [])):
            continue
        if not any(v in ("*", res.version) for v in rule.get("apiVersions", [])):
            continue
        if not any(r in ("*", name, f"{res.plural}/*") or (r == "*/*") for r in rule.get("resources", [])):
            continue
        scope = rule.get("scope", "*")
        if (scope == "Namespaced" and not res.namespaced) or (scope == "Cluster" and res.namespaced):
            continue
        return True
    return False


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if not selector:
        return True
    parts = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for e in selector.get("matchExpressions") or []:
        op = e["operator"]
        if op in ("In", "NotIn"):
            parts.append(f"{e['key']} {op.lower()} ({','.join(e.get('values') or [])})")
        elif op == "Exists":
            parts.append(e["key"])
        else:
            parts.append(f"!{e['key']}")
    return parse_label_selector(",".join(parts)).matches(labels)


class Webhooks:
    def __init__(self, store: ObjectStore, served: tuple[Resource, ...]) -> None:
        self.store = store
        self.by_plural = {(r.group, r.plural): r for r in served}
        self.services: dict[str, str] = {}
        # As the real server: connections to webhooks are kept alive, TLS contexts built once per caBundle.
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}

    def _context(self, bundle: str | None) -> ssl.SSLContext:
        key = bundle or ""
        context = self._contexts.get(key)
        if context is None:
            if bundle:
                context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
            else:
                context = ssl.create_default_context()
            self._contexts[key] = context
        return context

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _configs(self, plural: str) -> list[Obj]:
        res = self.by_plural[("admissionregistration.k8s.io", plural)]
        return self.store.list(res, None)[0]

    def _url(self, client_config: Obj) -> str:
        if client_config.get("url"):
            return str(client_config["url"])
        svc = client_config.get("service") or {}
        key = f"{svc.get('namespace')}/{svc.get('name')}:{svc.get('port', 443)}"
        base = self.services.get(key)
        if base is None:
            raise ConnectionError(f"service {key} is not reachable from the simulated cluster")
        return base.rstrip("/") + (svc.get("path") or "/")

    async def admit(
        self,
        res: Resource,
        operation: str,
        namespace: str,
        obj: Obj | None,
        old: Obj | None,
        sub: str = "",
        user: Obj | None = None,
    ) -> Outcome:
        """Call the matching webhooks; ``user`` is the request's ``userInfo`` (who asked)."""
        target = obj if obj is not None else (old or {})
        outcome = Outcome(obj=target)
        if res.group == "admissionregistration.k8s.io":
            return outcome  # webhook configurations are never themselves subject to webhooks
        # The real server compiles each matchCondition once and evaluates it in microseconds; this
        # one's CEL is interpreted, so an expression several hooks share (and its variables) is
        # evaluated once per version of the object under review.
        memo: Memo = {}
        seen = outcome.obj
        for plural, mutating in ((MUTATING, True), (VALIDATING, False)):
            for config in sorted(self._configs(plural), key=lambda c: c["metadata"]["name"]):
                for hook in config.get("webhooks") or []:
                    if outcome.obj is not seen:  # (a mutating hook patched it)
                        memo, seen = {}, outcome.obj
                    if not await self._applies(hook, res, operation, namespace, outcome.obj, old, sub, memo):
                        continue
                    outcome.obj = await self._call(
                        hook, res, operation, namespace, outcome, old, mutating, sub, user or ADMIN
                    )
        return outcome

    async def _applies(
        self, hook: Obj, res: Resource, operation: str, namespace: str, obj: Obj, old: Obj | None, sub: str, memo: Memo
    ) -> bool:
        if not _matches_rule(hook.get("rules") or [], res, operation, sub):
            return False
        # As the real server: an update is sent when the old or the new object matches.
        selector = hook.get("objectSelector")
        candidates = [o for o in (obj, old) if o is not None]
        if not any(_selector_matches(selector, (o.get("metadata") or {}).get("labels") or {}) for o in candidates):
            return False
        if res.namespaced and hook.get("namespaceSelector"):
            try:
                ns = self.store.get(NAMESPACES, "", namespace)
            except ApiError:
                return False
            if not _selector_matches(hook["namespaceSelector"], ns["metadata"].get("labels") or {}):
                return False
        return self._conditions_hold(hook, res, operation, namespace, obj, old, sub, memo)

    def _conditions_hold(
        self,
        hook: Obj,
        res: Resource,
        operation: str,
        namespace: str,
        obj: Obj,
        old: Obj | None,
        sub: str,
        memo: Memo,
    ) -> bool:
        conditions = hook.get("matchConditions") or []
        if not conditions:
            return True
        request = {
            "operation": operation,
            "namespace": namespace,
            "name": (obj.get("metadata") or {}).get("name", ""),
            "kind": {"group": res.group, "version": res.version, "kind": res.kind},
            "resource": {"group": res.group, "version": res.version, "resource": res.plural},
            "subResource": sub,
        }
        variables = {"object": obj if operation != "DELETE" else None, "oldObject": old, "request": request}
        if "" not in memo:
            memo[""] = cel.activation(variables)  # (the same for every hook of this version of the object)
        bound = memo[""]
        for condition in conditions:
            expression = str(condition.get("expression"))
            try:
                if expression not in memo:
                    memo[expression] = cel.condition(expression, bound)
                if not memo[expression]:
                    return False
            except Exception as exc:  # (celpy's evaluation errors, or one that does not compile)
                if hook.get("failurePolicy", "Fail") == "Fail":
                    raise ApiError(
                        500,
                        "InternalError",
                        f'failed calling webhook "{hook["name"]}": matchCondition {condition.get("name")!r}: {exc}',
                    ) from exc
                return False
        return True

    async def _call(
        self,
        hook: Obj,
        res: Resource,
        operation: str,
        namespace: str,
        outcome: Outcome,
        old: Obj | None,
        mutating: bool,
        sub: str,
        user: Obj,
    ) -> Obj:
        name = hook["name"]
        fail = hook.get("failurePolicy", "Fail") == "Fail"
        obj = outcome.obj
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": res.group, "version": res.version, "kind": res.kind},
                "resource": {"group": res.group, "version": res.version, "resource": res.plural},
                "subResource": sub or None,
                "requestKind": {"group": res.group, "version": res.version, "kind": res.kind},
                "name": (obj.get("metadata") or {}).get("name", ""),
                "namespace": namespace or None,
                "operation": operation,
                "userInfo": user,
                "object": obj if operation != "DELETE" else None,
                "oldObject": old,
                "dryRun": False,
                "options": None,
            },
        }
        try:
            context = self._context((hook.get("clientConfig") or {}).get("caBundle"))
            timeout = aiohttp.ClientTimeout(total=float(hook.get("timeoutSeconds", 10)))
            if self._session is None or self._session.closed:
                self._session = aiohttp.ClientSession()
            client = hook.get("clientConfig") or {}
            svc = client.get("service")
            # as the real server: a service is called by its DNS name, which the certificate must carry
            hostname = f"{svc.get('name')}.{svc.get('namespace')}.svc" if isinstance(svc, dict) else None
            async with self._session.post(
                self._url(client), json=review, ssl=context, timeout=timeout, server_hostname=hostname
            ) as resp:
                if resp.status != 200:
                    raise ConnectionError(f"the webhook answered HTTP {resp.status}")
                answer = (await resp.json()).get("response") or {}
        except (TimeoutError, aiohttp.ClientError, ConnectionError, ssl.SSLError, ValueError) as exc:
            if not fail:
                return obj
            raise ApiError(
                500, "InternalError", f'Internal error occurred: failed calling webhook "{name}": {exc}'
            ) from None
        outcome.warnings.extend(answer.get("warnings") or [])
        if not answer.get("allowed"):
            status = answer.get("status") or {}
            code = max(int(status.get("code") or 400), 400)
            message = status.get("message") or "without explanation"
            raise ApiError(
                code, status.get("reason") or "BadRequest", f'admission webhook "{name}" denied the request: {message}'
            )
        if mutating and answer.get("patch"):
            if answer.get("patchType", "JSONPatch") != "JSONPatch":
                raise ApiError(500, "InternalError", f'webhook "{name}" returned an unsupported patchType')
            return dict(patches.json_patch(obj, json.loads(base64.b64decode(answer["patch"]))))
        return obj


DEFAULT_TOKEN = "turnstile-sim"  # the token of the kubeconfig the simulator writes: an administrator


def user_of(request: web.Request) -> dict[str, Any]:
    """Who asks (the ``userInfo`` admission webhooks see). The simulator authenticates nobody: a
    bearer token names its user (``alice``, ``system:serviceaccount:ns:name``); the token of the
    kubeconfig it writes is ``system:admin``. So a test (or a second kubeconfig) can act as anyone."""
    header = request.headers.get("Authorization", "")
    token = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else ""
    if not token or token == DEFAULT_TOKEN:
        return dict(ADMIN)
    groups = ["system:authenticated"]
    if token.startswith("system:serviceaccount:"):
        groups.insert(0, "system:serviceaccounts")
    return {"username": token, "groups": groups}
