"""HTTP/1.1 exchanges with the API server on plain asyncio connections: every call of the client.

Why not aiohttp's client: an admission costs the controller about three requests (its job's
unsuspend patch, its Workload object's status patch, an Event) and four or five watch events, and
aiohttp spent 230-270 core-us of machinery on each request on this project's machine, more than the
controller's own decisions (``python -m bench client``). An exchange here is one write and a parse
of the status line, the headers and the body: about half of that.

What it speaks, and all it needs to with an API server: HTTP/1.1 with keep-alive, one exchange at a
time per connection (at most ``limit`` connections, aiohttp's pool size); answers sized by
``Content-Length``, chunked, or running to the connection's end; informational (1xx) answers
skipped; ``Connection: close`` honoured. TLS with the ``SSLContext`` the kubeconfig made (its CA,
client certificate and verification) and its ``tls-server-name``. A connection the server closed
while idle leaves the pool; one that breaks mid-exchange raises ``ConnectionError`` (the caller's
``KubeError(0)``, retried level-triggered, as aiohttp's ``ServerDisconnectedError`` was). A timeout
or a cancellation closes its connection: an answer read halfway cannot be reused. A watch is a
``Stream``: a connection of its own, its answer read chunk by chunk, each wait for more bounded by a
read timeout (the server's ``timeoutSeconds`` and a margin), closed when the watch ends.

A kubeconfig with a proxy, or an environment naming one, leaves every call to aiohttp
(``admission.kube.client.Kube.lean`` is None then): proxies are its business.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
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
        self.read_timeout: float | None = None  # (a stream's: the longest wait for more bytes)

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
            if self.read_timeout is None:
                await self.waiter
            else:
                async with asyncio.timeout(self.read_timeout):
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
        status, headers, keep = await self.head(request)
        if head_only or status in (204, 304):
            return Answer(status, headers, b""), keep and not self.closed and not self.buffer
        body = b"".join([piece async for piece in self.pieces(headers)])
        keep = keep and ("Content-Length" in headers or "chunked" in headers.get("Transfer-Encoding", "").lower())
        return Answer(status, headers, body), keep and not self.closed and not self.buffer

    async def head(self, request: bytes) -> tuple[int, CIMultiDict[str], bool]:
        """Send ``request``; the answer's status and headers, and whether the server keeps the
        connection open after it."""
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
        return status, headers, version == "HTTP/1.1" and "close" not in headers.get("Connection", "").lower()

    async def pieces(self, headers: CIMultiDict[str]) -> AsyncIterator[bytes]:
        """The answer's body as it arrives: chunk by chunk, up to its ``Content-Length``, or to the
        connection's end."""
        if "chunked" in headers.get("Transfer-Encoding", "").lower():
            while size := int((await self._line()).split(b";", 1)[0].strip(), 16):
                yield await self._exactly(size)
                await self._exactly(2)  # (the CRLF after each chunk)
            while await self._line():  # trailers, up to the empty line
                pass
        elif (length := headers.get("Content-Length")) is not None:
            yield await self._exactly(int(length))
        else:
            while not self.closed:
                await self._more()
            body = bytes(self.buffer)
            self.buffer.clear()
            yield body


class Stream:
    """An answer read as it comes (a watch) on a connection of its own, closed with it."""

    def __init__(self, connection: _Connection, status: int, headers: CIMultiDict[str]) -> None:
        self.connection, self.status, self.headers = connection, status, headers

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body as it arrives (each wait for more bounded by the stream's ``read_timeout``)."""
        try:
            async for piece in self.connection.pieces(self.headers):
                yield piece
        except (ValueError, IndexError) as exc:
            raise ConnectionError(f"the API server's answer is not HTTP/1.1: {exc}") from exc

    def close(self) -> None:
        self.connection.close()


class Transport:
    """Keep-alive connections to one API server (``url``: its scheme, host, port and path prefix)."""

    def __init__(
        self, url: str, *, ssl_context: ssl.SSLContext | None, server_hostname: str | None = None, limit: int = 100
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r}: not an http(s) URL of an API server")
        self.https = parts.scheme == "https"
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
        request = self._request(method, target, headers, body)
        if self.gate is None:
            return await self._exchange(method, request, timeout)
        async with self.gate:
            return await self._exchange(method, request, timeout)

    def _request(self, method: str, target: str, headers: Mapping[str, str], body: bytes | None) -> bytes:
        lines = [f"{method} {self.prefix}{target} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")

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

    async def stream(
        self, method: str, target: str, headers: Mapping[str, str], *, timeout: float | None, read_timeout: float
    ) -> Stream:
        """An exchange whose answer is read as it comes, on a new connection: its head within
        ``timeout``, then each wait for more of it within ``read_timeout`` (``TimeoutError``)."""
        request = self._request(method, target, headers, None)
        connection: _Connection | None = None
        try:
            async with asyncio.timeout(timeout):
                connection = await self._connect()
                status, answer_headers, _ = await connection.head(request)
        except (ValueError, IndexError) as exc:
            if connection is not None:
                connection.close()
            raise ConnectionError(f"the API server's answer is not HTTP/1.1: {exc}") from exc
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        connection.read_timeout = read_timeout
        return Stream(connection, status, answer_headers)

    async def _connection(self) -> _Connection:
        while self.idle:
            connection = self.idle.pop()
            if not connection.closed:
                return connection
        return await self._connect()

    async def _connect(self) -> _Connection:
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
