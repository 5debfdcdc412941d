"""HTTP/1.1 exchanges with the API server on plain asyncio connections: the client's unary calls.

Why not aiohttp's client for these: an admission costs the controller about three requests (its
job's unsuspend patch, its Workload object's status patch, an Event), and aiohttp spent 243-285
core-us of machinery on each on this project's machine (``python -m bench client``): about half of
the controller's CPU per admission. An exchange here is one write and a parse of the status line,
the headers and the body: 150-166 core-us per request through ``Kube`` there.

What it speaks, and all it needs to with an API server: HTTP/1.1 with keep-alive, one exchange at a
time per connection (at most ``limit`` connections, aiohttp's pool size); answers sized by
``Content-Length``, chunked, or running to the connection's end; informational (1xx) answers
skipped; ``Connection: close`` honoured. TLS with the ``SSLContext`` the kubeconfig made (its CA,
client certificate and verification) and its ``tls-server-name``. A connection the server closed
while idle, or that received bytes while idle (a proxy's 408), leaves the pool; one that breaks
mid-exchange raises ``ConnectionError`` (the caller's ``KubeError(0)``, retried level-triggered, as
aiohttp's ``ServerDisconnectedError`` was). A timeout or a cancellation closes its connection: an
answer read halfway cannot be reused.

Watches stay on aiohttp (``admission.kube.client.Kube.watch``): long streams, few of them. A
kubeconfig with a proxy uses aiohttp for everything (``Kube`` makes no ``Transport`` then).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from multidict import CIMultiDict


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # (any case of a name finds it)
    body: bytes


class _Connection(asyncio.Protocol):
    """One connection: bytes received so far, and a future woken when more come or it ends."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False  # (the transport closes itself)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def _more(self) -> None:
        """Wait until more bytes arrive; ``ConnectionError`` if none ever will."""
        if self.closed:
            raise ConnectionError("the API server closed the connection mid-answer")
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    async def _line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            await self._more()
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        return line

    async def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self._more()
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    async def exchange(self, request: bytes, *, head_only: bool) -> tuple[Answer, bool]:
        """Send ``request``; its answer, and whether this connection may carry another exchange."""
        assert self.transport is not None
        self.transport.write(request)
        while True:
            while (end := self.buffer.find(b"\r\n\r\n")) < 0:
                await self._more()
            lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            del self.buffer[: end + 4]
            version, _, rest = lines[0].partition(" ")
            status = int(rest[:3])
            if status >= 200 or status == 101:
                break  # (1xx: informational, the answer follows)
        headers: CIMultiDict[str] = CIMultiDict()
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.add(name.strip(), value.strip())
        keep = version == "HTTP/1.1" and "close" not in headers.get("Connection", "").lower()
        if head_only or status in (204, 304):
            body = b""
        elif "chunked" in headers.get("Transfer-Encoding", "").lower():
            body = await self._chunked()
        elif (length := headers.get("Content-Length")) is not None:
            body = await self._exactly(int(length))
        else:  # (the answer runs to the connection's end)
            while not self.closed:
                await self._more()
            body, keep = bytes(self.buffer), False
            self.buffer.clear()
        return Answer(status, headers, body), keep and not self.closed and not self.buffer

    async def _chunked(self) -> bytes:
        parts = []
        while size := int((await self._line()).split(b";", 1)[0].strip(), 16):
            parts.append(await self._exactly(size))
            await self._exactly(2)  # (the CRLF after each chunk)
        while await self._line():  # trailers, up to the empty line
            pass
        return b"".join(parts)


class Transport:
    """Keep-alive connections to one API server (``url``: its scheme, host, port and path prefix)."""

    def __init__(
        self, url: str, *, ssl_context: ssl.SSLContext | None, server_hostname: str | None = None, limit: int = 100
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r}: not an http(s) URL of an API server")
        self.https = parts.scheme == "https"
        if self.https and ssl_context is None:
            raise ValueError(f"{url!r}: https needs the kubeconfig's TLS context")
        self.hostname = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")  # (an API server behind a proxy may live under a path)
        self.host_header = parts.netloc.rpartition("@")[2]
        self.ssl_context = ssl_context if self.https else None
        self.server_hostname = server_hostname if self.https else None
        self.idle: list[_Connection] = []
        self.gate = asyncio.Semaphore(limit) if limit > 0 else None  # (connections at most; 0: no limit)

    async def request(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None, *, timeout: float | None
    ) -> Answer:
        """One exchange: ``target`` is the path and query under the server's URL. Raises
        ``ConnectionError``/``OSError`` when the connection fails, ``TimeoutError`` after ``timeout``."""
        lines = [f"{method} {self.prefix}{target} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        if self.gate is None:
            return await self._exchange(method, request, timeout)
        async with self.gate:
            return await self._exchange(method, request, timeout)

    async def _exchange(self, method: str, request: bytes, timeout: float | None) -> Answer:
        async with asyncio.timeout(timeout):
            connection = await self._connection()
            try:
                answer, keep = await connection.exchange(request, head_only=method == "HEAD")
            except (ValueError, IndexError) as exc:
                connection.close()
                raise ConnectionError(f"the API server's answer is not HTTP/1.1: {exc}") from exc
            except BaseException:
                connection.close()  # (half an answer: the connection cannot carry another)
                raise
        if keep:
            self.idle.append(connection)
        else:
            connection.close()
        return answer

    async def _connection(self) -> _Connection:
        while self.idle:
            connection = self.idle.pop()
            if not connection.closed and not connection.buffer:
                return connection
            connection.close()  # (closed by the server while idle, or it said something unasked: a 408)
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            _Connection,
            self.hostname,
            self.port,
            ssl=self.ssl_context,
            server_hostname=(self.server_hostname or self.hostname) if self.ssl_context is not None else None,
        )
        return connection

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()
