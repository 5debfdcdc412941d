"""A watch, as the real API server streams one: the list or the history since a resourceVersion,
then every change as it happens, bookmarks while idle, until the timeout or the client leaves.

As the real server's watch cache filters a selected watch, an object that stops matching a
label or field selector is sent as DELETED and one that starts matching as ADDED; an expired
resourceVersion is an ERROR event with a 410 ``Status``; ``Accept: ...as=Table`` sends rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from admission.sim.server import tables
from admission.sim.server.object_store import ObjectStore, Watcher
from admission.sim.server.objects import ApiError, Event, Obj, Resource, field_matcher, parse_label_selector

BOOKMARK_SECONDS = 1.0
WATCH_TRUE = ("true", "True", "1")

Table = Callable[[web.Request, Resource, list[Obj], dict[str, Any]], Obj]


class Watches:
    """The watches one API server serves: its store's, with their streams and count."""

    def __init__(self, store: ObjectStore, table: Table, delay: Callable[[], float]) -> None:
        self.store = store
        self.table = table  # rows for ``as=Table`` (the server's ``_table``)
        self.delay = delay  # seconds each event is held back (a fault: a slow watch cache)
        self.streams: set[Watcher] = set()
        self.served = 0

    def drop(self) -> None:
        """End every watch (the server stops, or a test cuts them)."""
        for watcher in list(self.streams):
            watcher.queue.put_nowait(None)

    async def serve(
        self,
        request: web.Request,
        res: Resource,
        namespace: str | None,
        *,
        convert: Callable[[Obj], Obj] | None = None,
        shown_as: Resource | None = None,
    ) -> web.StreamResponse:
        """A watch of ``res``; with ``convert``, its objects shown as ``shown_as`` (a view's)."""
        rv_param = request.query.get("resourceVersion", "")
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        bookmarks = request.query.get("allowWatchBookmarks") in WATCH_TRUE
        self.served += 1
        watcher = Watcher(res, namespace)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)

        as_table = tables.wants_table(request.headers.get("Accept", ""))
        # As the real server's watch cache filters a selected watch: an object that stops matching
        # is sent as DELETED, one that starts matching as ADDED, others not at all.
        labels, fields = request.query.get("labelSelector", ""), request.query.get("fieldSelector", "")
        label_match = parse_label_selector(labels) if labels else None
        field_match = field_matcher(fields, res.kind) if fields else None

        def matches(obj: Obj) -> bool:
            meta = obj.get("metadata") or {}
            return (label_match is None or label_match.matches(meta.get("labels") or {})) and (
                field_match is None or field_match(obj)
            )

        async def send(kind: str, obj: Any, prev: Obj | None = None) -> None:
            if kind in ("ADDED", "MODIFIED", "DELETED") and (label_match is not None or field_match is not None):
                now, before = matches(obj), kind == "MODIFIED" and prev is not None and matches(prev)
                if kind == "MODIFIED" and now != before:
                    kind = "ADDED" if now else "DELETED"
                elif not now:
                    return
            if convert is not None and kind in ("ADDED", "MODIFIED", "DELETED"):
                obj = convert(obj)
            if as_table and kind in ("ADDED", "MODIFIED", "DELETED"):
                obj = self.table(request, shown_as or res, [obj], obj.get("metadata") or {})
            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        # Register before reading history, so nothing falls between the two.
        self.store.watchers.append(watcher)
        self.streams.add(watcher)
        try:
            backlog: list[Event] = []
            if rv_param in ("", "0"):
                items, _ = self.store.list(res, namespace)
                for obj in items:
                    await send("ADDED", obj)
                last = self.store.rv
            else:
                try:
                    last = int(rv_param)
                    backlog = self.store.events_since(res, namespace, last)
                except ApiError as exc:
                    await send("ERROR", exc.status())
                    return await _end(response)
                except ValueError:
                    await send("ERROR", ApiError(400, "BadRequest", f"invalid resourceVersion {rv_param!r}").status())
                    return await _end(response)
            for old in backlog:
                await send(old.type, old.obj, old.prev)
                last = old.rv
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while (remaining := deadline - loop.time()) > 0:
                try:
                    async with asyncio.timeout(min(remaining, BOOKMARK_SECONDS)):
                        event = await watcher.queue.get()
                except TimeoutError:
                    if bookmarks:
                        version = bookmark_version(watcher, self.store.rv, last)
                        await send(
                            "BOOKMARK",
                            {
                                "kind": (shown_as or res).kind,
                                "apiVersion": (shown_as or res).api_version,
                                "metadata": {"resourceVersion": str(version)},
                            },
                        )
                    continue
                if event is None:
                    break
                if event.rv > last:
                    if self.delay():
                        await asyncio.sleep(max(0.0, event.at + self.delay() - loop.time()))
                    await send(event.type, event.obj, event.prev)
                    last = event.rv
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away (ConnectionResetError, aiohttp's "Connection lost"), or we stop
        finally:
            with contextlib.suppress(ValueError):
                self.store.watchers.remove(watcher)
            self.streams.discard(watcher)
        return await _end(response)


async def _end(response: web.StreamResponse) -> web.StreamResponse:
    """End a watch's chunked stream cleanly (the client sees a complete response)."""
    with contextlib.suppress(ConnectionError, RuntimeError):
        await response.write_eof()
    return response


def bookmark_version(watcher: Watcher, latest: int, sent: int) -> int:
    """The version up to which a stream has delivered everything: the store's latest only when
    nothing is still queued for it. A client resumes from a bookmark, so one ahead of a queued
    event would make it lose that event."""
    queued = [e.rv for e in watcher.queue._queue if e is not None]  # type: ignore[attr-defined]
    return max(sent, min(queued) - 1) if queued else max(sent, latest)
