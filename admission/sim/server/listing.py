"""A LIST, as the real API server answers one: pages (``limit``, ``continue`` tokens that expire
with the history they need, every page at its first page's resourceVersion), label and field
selectors, ``remainingItemCount`` on unfiltered lists, TypeMeta only on the list for built-in kinds.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import web

from admission.sim.server.object_store import ObjectStore
from admission.sim.server.objects import ApiError, Resource


def list_of(
    store: ObjectStore, request: web.Request, res: Resource, namespace: str | None, *, custom: bool
) -> dict[str, Any]:
    """A LIST of ``res`` (``custom``: a CRD's kind), one page as the request's ``limit`` and
    ``continue`` ask, filtered by its label and field selectors."""
    after, since = _continue_from(store, request.query.get("continue"))
    try:
        limit = int(request.query.get("limit") or 0)
    except ValueError:
        raise ApiError(400, "BadRequest", f"invalid limit {request.query.get('limit')!r}") from None
    labels, fields = request.query.get("labelSelector", ""), request.query.get("fieldSelector", "")
    page = store.page(res, namespace, labels=labels, fields=fields, after=after, limit=max(limit, 0))
    # As the real server, every page of one list carries the first page's resourceVersion: a
    # watch started from the last page replays whatever changed while the pages were read.
    meta: dict[str, Any] = {"resourceVersion": str(since or page.rv)}
    if page.last is not None:
        token = {"v": "meta.k8s.io/v1", "rv": since or page.rv, "start": f"{page.last[0]}/{page.last[1]}\x00"}
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
        if not labels and not fields:  # the real server counts what is left only for an unfiltered list
            meta["remainingItemCount"] = page.remaining
    items = page.items
    if not custom:
        # As the real server: a built-in kind's list carries TypeMeta once, on the list; its
        # items have none (a custom resource's items keep theirs). Clients must take the kind
        # from the resource they listed.
        for item in items:
            item.pop("apiVersion", None)
            item.pop("kind", None)
    return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items}


def _continue_from(store: ObjectStore, token: str | None) -> tuple[tuple[str, str] | None, int]:
    """The key a continue token resumes after and the resourceVersion of its first page."""
    if not token:
        return None, 0
    try:
        parsed = json.loads(base64.urlsafe_b64decode(token))
        rv, start = int(parsed["rv"]), str(parsed["start"]).rstrip("\x00")
        namespace, _, name = start.rpartition("/")
    except (ValueError, KeyError, TypeError):
        raise ApiError(400, "BadRequest", "continue key is not valid: invalid continue token") from None
    if rv < store.horizon:
        raise ApiError(
            410, "Expired", "The provided continue parameter is too old to display a consistent list result. "
            "You can start a new list without the continue parameter.",
        )  # fmt: skip
    return (namespace, name), rv
