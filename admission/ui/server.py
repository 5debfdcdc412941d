"""The dashboard's HTTP side: the page, its JSON, and one live stream of "something changed".

Served by every controller replica at ``/ui/`` on its metrics port (and so by ``turnstile sim
up`` and ``turnstile demo``), read-only, without a login of its own: it is reached through
``kubectl port-forward`` or the cluster's ingress and auth proxy, like ``/metrics``.

Live without polling storms: one task per replica asks PostgreSQL for a cheap version
(``data.version``) every ``tick`` seconds while anyone watches, and each open page holds one
server-sent-events stream (``/ui/events``) that says ``changed`` when it moves; the page then
re-reads only what it shows. ``EventSource`` reconnects by itself after a dropped connection or a
controller restart, and a page that reconnects reads everything again.

The page is static (``admission/ui/static``: HTML, CSS and plain JavaScript, no build step and
no Node.js anywhere); everything it shows is put in the DOM as text, never as HTML, so a queue or
namespace named ``<script>`` is shown, not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from admission.store import config as config_store
from admission.store import database
from admission.ui import data

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
Idle = Callable[[], dict[tuple[str, str], int] | None]
JobEvents = Callable[[str], Awaitable[list[dict[str, Any]]]]  # workload key -> its job's Kubernetes Events


class Dashboard:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        idle: Idle = lambda: None,
        job_events: JobEvents | None = None,
        tick: float = 1.0,
        fractions: Callable[[], data.Fractions] = dict,
    ) -> None:
        self.sessions = sessions
        self.fractions = fractions  # GPU resources' parts of a card, as ``turnstile usage`` bills them
        self.idle = idle  # (flavor, resource) -> milli-units held by workloads measured idle (leader only)
        self.job_events = job_events  # (a replica reads them from the API server; None: not shown)
        self.tick = tick
        self.listeners: set[asyncio.Queue[str]] = set()
        self.version = ""
        self._watch: asyncio.Task[None] | None = None

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/ui", self._redirect)
        app.router.add_get("/ui/", self._index)
        app.router.add_static("/ui/static/", STATIC, append_version=False)
        app.router.add_get("/ui/api/overview", self._json(lambda s, r: data.overview(s, self.idle(), self.fractions())))
        app.router.add_get("/ui/api/pending", self._json(self._pending))
        app.router.add_get("/ui/api/workload", self._json(self._workload))
        app.router.add_get("/ui/api/usage", self._json(self._usage))
        app.router.add_get("/ui/api/audit", self._json(lambda s, r: data.audit(s)))
        app.router.add_get("/ui/events", self._events)
        app.on_cleanup.append(self._stop)

    async def _redirect(self, _request: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/")

    async def _index(self, _request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    def _json(
        self, read: Callable[[AsyncSession, web.Request], Awaitable[Any]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            try:
                async with database.transaction(self.sessions) as session:
                    body = await read(session, request)
            except config_store.NotFound as exc:
                return web.json_response({"error": str(exc)}, status=404)
            except ValueError as exc:
                return web.json_response({"error": str(exc)}, status=400)
            except database.ERRORS as exc:
                return web.json_response({"error": f"database: {database.describe_error(exc)}"}, status=503)
            return web.json_response(body, dumps=lambda o: json.dumps(o, default=str))

        return handler

    async def _workload(self, session: AsyncSession, request: web.Request) -> Any:
        name = request.query.get("name", "")
        body = await data.workload(session, name, self.fractions())
        body["events"] = None
        if self.job_events is not None and "/" in name:
            try:
                body["events"] = await self.job_events(name)
            except Exception as exc:  # the API server away: the rest of the page still shows
                log.debug("dashboard: events of %s not read: %s", name, exc)
        return body

    async def _pending(self, session: AsyncSession, request: web.Request) -> Any:
        offset = _int(request.query.get("offset", "0"), "offset")
        limit = min(200, _int(request.query.get("limit", str(data.PAGE)), "limit"))
        return await data.pending(session, request.query.get("queue", ""), offset, limit)

    async def _usage(self, session: AsyncSession, request: web.Request) -> Any:
        days = float(request.query.get("days", "30"))
        if not 0 < days <= 3660:
            raise ValueError(f"days {days}: must be between 0 and 3660")
        return await data.usage(
            session, by=request.query.get("by", "label:team"), days=days, fractions=self.fractions()
        )

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        await response.prepare(request)
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        self.listeners.add(queue)
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self._watch_versions(), name="ui-versions")
        try:
            await response.write(f"retry: 2000\nevent: changed\ndata: {json.dumps(self.version)}\n\n".encode())
            while True:
                version = None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(15.0):
                        version = await queue.get()
                if version is None:
                    await response.write(b": keep-alive\n\n")  # (proxies close idle streams)
                else:
                    await response.write(f"event: changed\ndata: {json.dumps(version)}\n\n".encode())
        except ConnectionResetError:
            pass  # the page went away (its EventSource reconnects if it is still open)
        finally:
            self.listeners.discard(queue)
        return response

    async def _watch_versions(self) -> None:
        """While anyone listens: read the version every ``tick``; tell every listener when it moves."""
        while self.listeners:
            try:
                async with database.transaction(self.sessions) as session:
                    version = await data.version(session)
            except database.ERRORS as exc:
                log.debug("dashboard: version not read: %s", database.describe_error(exc))
                version = self.version
            if version != self.version:
                self.version = version
                for queue in list(self.listeners):
                    with contextlib.suppress(asyncio.QueueEmpty):
                        queue.get_nowait()  # (only the newest matters)
                    queue.put_nowait(version)
            await asyncio.sleep(self.tick)

    async def _stop(self, _app: web.Application) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch


def _int(value: str, name: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name} {value!r}: must be a whole number") from None
    if number < 0:
        raise ValueError(f"{name} {number}: must be >= 0")
    return number
