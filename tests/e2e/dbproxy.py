"""A TCP proxy between Turnstile and PostgreSQL that can fail the way networks fail.

Faults are injected here, on real connections, never by mocking the database client:
``cut()`` resets every connection and refuses new ones (a crashed proxy, a failover);
``blackhole()`` keeps connections open but forwards nothing either way, and new connections
hang too (a partition: nothing fails, everything waits); ``heal()`` goes back to forwarding.
The target is the test PostgreSQL: TCP, or the embedded server's unix socket (which trusts
local connections, so the proxied ones need no password either).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from admission import urls

PASS, CUT, BLACKHOLE = "pass", "cut", "blackhole"


class DatabaseProxy:
    def __init__(self, target_url: str) -> None:
        self.target_url = target_url
        self.mode = PASS
        self.server: asyncio.Server | None = None
        self.port = 0
        self.streams: set[asyncio.StreamWriter] = set()
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.connections = 0

    def url(self) -> str:
        """The same database as ``target_url``, reached through this proxy over TCP."""
        parts = urlsplit(self.target_url)
        user = parts.username or "postgres"
        return f"postgresql+asyncpg://{user}@127.0.0.1:{self.port}/{urls.database_name(self.target_url)}"

    async def _open_target(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        parts = urlsplit(self.target_url)
        socket_dir = (parse_qs(parts.query).get("host") or [""])[0]
        if socket_dir.startswith("/"):
            return await asyncio.open_unix_connection(str(Path(socket_dir) / f".s.PGSQL.{parts.port or 5432}"))
        return await asyncio.open_connection(parts.hostname or "127.0.0.1", parts.port or 5432)

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self.heal()
        if self.server is not None:
            self.server.close()
        for w in list(self.streams):
            w.close()
        if self.server is not None:
            await self.server.wait_closed()

    def cut(self) -> None:
        self.mode = CUT
        for w in list(self.streams):
            with contextlib.suppress(Exception):
                w.transport.abort()

    def blackhole(self) -> None:
        self.mode = BLACKHOLE
        self.flowing.clear()

    def heal(self) -> None:
        self.mode = PASS
        self.flowing.set()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == CUT:
            writer.transport.abort()
            return
        await self.flowing.wait()  # a black hole: the connection opens, then nothing
        try:
            upstream_reader, upstream_writer = await self._open_target()
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        self.streams.update((writer, upstream_writer))
        pipes = [
            asyncio.create_task(self._pipe(reader, upstream_writer)),
            asyncio.create_task(self._pipe(upstream_reader, writer)),
        ]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pipes:
                p.cancel()
            for w in (writer, upstream_writer):
                self.streams.discard(w)
                with contextlib.suppress(Exception):
                    w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                await self.flowing.wait()  # held (not dropped) while black-holed, as a stalled network
                if self.mode == CUT:
                    return
                writer.write(data)
                await writer.drain()


@contextlib.asynccontextmanager
async def proxied(target_url: str) -> AsyncIterator[DatabaseProxy]:
    proxy = DatabaseProxy(target_url)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
