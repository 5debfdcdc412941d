"""The webhook's HTTPS server: AdmissionReview ``admission.k8s.io/v1`` on ``/mutate`` and ``/validate``.

Answers come from an in-memory configuration (``config_source``), refreshed by the
controller on NOTIFY: never a database round trip per request. Until a configuration has
been loaded the server answers 503, so the API server (failurePolicy Fail) refuses the job
rather than letting it start unsuspended; readiness says the same. Kueue's queue objects
(``kueue.x-k8s.io``) are answered without it (``admission.webhook.queue_objects``), and so are its
Workload objects (``admission.webhook.workload_objects``: only ``spec.active`` may change, and that
is written as a request to the leader). Malformed bodies get 400
and oversized ones 413, each with a ``kind: Status``; DELETE is always allowed (a queue object's
DELETE tells ``deletions`` who asked, for the audit log). A review that
fails inside Turnstile (a bug, or an object shaped as no schema allows) is refused, never allowed
unchanged: a queued job let through unsuspended would run outside every quota (fail closed).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from admission.policy import HOLD, Policy
from admission.webhook import pods, queue_objects, review, workload_objects
from queues.dra import charges
from queues.model import Config
from queues.podsets import jobs, trainjobs

log = logging.getLogger(__name__)

# (kind, key, uid, user): remember who asked to delete a queue object
Deletions = Callable[[str, str, str, str], Awaitable[None]]

MAX_BODY = 3 * 1024 * 1024  # the API server never sends more than its own request limit
QUEUE_WAIT = 0.5  # seconds a job naming an unknown LocalQueue waits for the configuration to catch up
RECENT_QUEUE = 10.0  # seconds a LocalQueue admitted here counts as on its way into the configuration
RECENT_QUEUE_WAIT = 3.0  # ... and how long a job naming it then waits at most


def _described(request_kind: Any, obj: Any, namespace: str) -> str:
    """``Job ml/train``, from what can be read of a review whatever its shape."""
    kind = request_kind.get("kind") if isinstance(request_kind, dict) else None
    kind = kind or (obj.get("kind") if isinstance(obj, dict) else None)
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return f"{kind or 'object'} {namespace}/{name if isinstance(name, str) else '?'}"


def _status(code: int, message: str) -> web.Response:
    body = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "message": message}
    return web.json_response(body, status=code)


class WebhookServer:
    def __init__(
        self,
        config_source: Callable[[], Config | None],
        *,
        missing_queue: str = HOLD,
        policy: Policy | None = None,
        group_totals: pods.GroupTotals = lambda _ns, _group: set(),
        runtimes: trainjobs.Runtimes | None = None,
        devices: Callable[[], charges.Devices] | None = None,
        deletions: Deletions | None = None,
        activity: workload_objects.Activity | None = None,
    ) -> None:
        self.config_source = config_source
        self.activity = activity  # where a person's spec.active on a Workload becomes a stop/resume request
        self.deletions = deletions  # where who deleted a queue object is written (for the audit log)
        self.runtimes = runtimes  # a TrainJob's training runtime (the controller's informers keep them)
        self.devices = devices  # DRA: what a job's device claims charge (the controller's informers keep them)
        # what is queued or held (a job naming a LocalQueue that does not exist: hold, Kueue's, or refuse)
        self.policy = policy or Policy(missing_queue=missing_queue)
        self.group_totals = group_totals  # the total counts of a pod group's existing pods
        self.app = web.Application(client_max_size=MAX_BODY)
        self.app.router.add_post("/mutate", self._mutate)
        self.app.router.add_post("/validate", self._validate)
        self.reviews = 0
        # LocalQueues this replica's queue-object webhook admitted (key -> when), pruned as they age
        self.local_queues_seen: dict[str, float] = {}

    def _saw_local_queue(self, key: str) -> None:
        now = time.monotonic()
        if len(self.local_queues_seen) > 1000:
            self.local_queues_seen = {k: t for k, t in self.local_queues_seen.items() if now - t < RECENT_QUEUE}
        self.local_queues_seen[key] = now

    async def _caught_up(self, config: Config, namespace: str, obj: dict[str, Any]) -> Config:
        """The configuration, once it holds the LocalQueue ``obj`` names, if that queue is on its
        way: a LocalQueue and its jobs applied in one ``kubectl apply`` reach the webhook before the
        controller has mirrored the queue into PostgreSQL. It waits (``QUEUE_WAIT`` seconds at most,
        longer when this replica admitted that LocalQueue moments ago) rather than warn that the
        queue does not exist; a queue that never comes costs the short wait once, and the warning."""
        labels = (obj.get("metadata") or {}).get("labels") if isinstance(obj.get("metadata"), dict) else None
        queue = labels.get(jobs.QUEUE_LABEL) if isinstance(labels, dict) else None
        key = f"{namespace}/{queue}"
        if not isinstance(queue, str) or not queue or key in config.local_queues:
            return config  # (a malformed object is left to the review, which refuses it naming the field)
        seen = self.local_queues_seen.get(key)
        recent = seen is not None and time.monotonic() - seen < RECENT_QUEUE
        deadline = time.monotonic() + (RECENT_QUEUE_WAIT if recent else QUEUE_WAIT)
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            config = self.config_source() or config
            if key in config.local_queues:
                break
        return config

    async def _mutate(self, request: web.Request) -> web.Response:
        return await self._review(request, mutating=True)

    async def _validate(self, request: web.Request) -> web.Response:
        return await self._review(request, mutating=False)

    async def _review(self, request: web.Request, *, mutating: bool) -> web.Response:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _status(413, f"AdmissionReview larger than {MAX_BODY} bytes")
        try:
            body = json.loads(raw)
            req = body["request"]
            uid = str(req["uid"])
            operation = str(req.get("operation") or "")
            obj = req.get("object")
            old = req.get("oldObject")
            namespace = str(req.get("namespace") or (obj or {}).get("metadata", {}).get("namespace") or "default")
            if not isinstance(obj, dict) and operation != "DELETE":
                raise TypeError("request.object must be an object")
            if old is not None and not isinstance(old, dict):
                raise TypeError("request.oldObject must be an object")
        except RecursionError:
            return _status(400, "not an AdmissionReview admission.k8s.io/v1: nested too deeply")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return _status(400, f"not an AdmissionReview admission.k8s.io/v1: {exc!r}"[:1000])
        self.reviews += 1
        answer = review.Answer()
        if workload_objects.is_workload(req.get("kind")):  # (Kueue's Workload objects, the leader's projection)
            if not mutating and isinstance(obj, dict):
                try:
                    answer = await workload_objects.review(operation, obj, old, req.get("userInfo"), self.activity)
                except Exception:  # a bug: refuse (fail closed), never let an edit through unrecorded
                    log.exception("review of a Workload object failed")
                    answer = review.Answer(allowed=False, message="turnstile could not review this Workload (a bug)")
        elif operation == "DELETE" and queue_objects.is_queue_object(req.get("kind")) and isinstance(old, dict):
            await self._deleted(req, old)
        elif operation != "DELETE" and isinstance(obj, dict) and queue_objects.is_queue_object(req.get("kind")):
            if operation == "CREATE" and (req.get("kind") or {}).get("kind") == "LocalQueue":
                self._saw_local_queue(f"{namespace}/{(obj.get('metadata') or {}).get('name')}")
            try:
                if mutating:
                    answer = queue_objects.mutate(operation, obj, old, req.get("userInfo"))
                else:
                    afs = self.policy.admission_fair_sharing is not None
                    answer = queue_objects.validate(operation, obj, old, admission_fair_sharing=afs)
            except Exception:  # a bug: refuse (an unvalidated queue object could stop the scheduler's reading)
                log.exception("review of a queue object failed")
                answer = review.Answer(allowed=False, message="turnstile could not review this queue object (a bug)")
        elif operation != "DELETE" and isinstance(obj, dict):
            config = self.config_source()
            if config is None:
                return _status(503, "the queue configuration is not loaded yet; retry shortly")
            integration = review.integration_of(req.get("kind"), obj)
            pod_kind = pods.kind_of(req.get("kind"), obj)
            policy = self.policy
            try:
                if operation == "CREATE":
                    config = await self._caught_up(config, namespace, obj)
                if pod_kind == "Pod" and mutating:
                    if operation == "CREATE":  # a pod is held at its creation only
                        answer = pods.mutate_pod(obj, namespace, config, policy)
                elif pod_kind == "Pod":
                    answer = pods.validate_pod(operation, obj, old, namespace, config, policy, self.group_totals)
                elif pod_kind is not None and mutating:
                    answer = pods.mutate_parent(pod_kind, obj, namespace, config, policy)
                elif pod_kind is not None:
                    answer = pods.validate_parent(operation, pod_kind, obj, old, namespace, config, policy)
                elif mutating and operation == "CREATE":
                    answer = review.mutate(obj, namespace, config, integration, policy)
                elif not mutating:
                    answer = review.validate(
                        operation,
                        obj,
                        old,
                        namespace,
                        config,
                        integration,
                        policy=policy,
                        runtimes=self.runtimes,
                        devices=self.devices() if self.devices is not None else None,
                    )
            except Exception as exc:  # fail closed: a queued job allowed unreviewed would run outside its quota
                what = _described(req.get("kind"), obj, namespace)
                log.exception("review of %s %s failed; refusing it", operation, what)
                answer = review.Answer(
                    allowed=False,
                    message=(
                        f"{what}: Turnstile could not review it ({type(exc).__name__}: {exc}"[:300]
                        + "); nothing was changed. Check the object's metadata and spec against its kind's schema "
                        "and apply it again; if it is valid, report this with the object"
                    ),
                )
        response: dict[str, Any] = {"uid": uid, "allowed": answer.allowed}
        if not answer.allowed:
            response["status"] = {"code": 403, "reason": "Forbidden", "message": answer.message}
        if answer.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(answer.patch).encode()).decode()
        if answer.warnings:
            response["warnings"] = answer.warnings
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})

    async def _deleted(self, req: dict[str, Any], old: dict[str, Any]) -> None:
        """A queue object's DELETE: who asked, written for the audit (allowed whatever happens here)."""
        user = req.get("userInfo")
        username = str(user.get("username") or "") if isinstance(user, dict) else ""
        found = old.get("metadata")
        meta: dict[str, Any] = found if isinstance(found, dict) else {}
        request_kind = req.get("kind")
        kind = str(request_kind.get("kind") or "") if isinstance(request_kind, dict) else ""
        name = str(meta.get("name") or "")
        key = f"{meta['namespace']}/{name}" if meta.get("namespace") else name
        if self.deletions is None or not (username and kind and name):
            return
        try:
            await self.deletions(kind, key, str(meta.get("uid") or ""), username)
        except Exception as exc:  # (the database away: the deletion is audited under its last editor)
            log.warning("could not record who deleted %s %s (%s): %s", kind, key, username, exc)
