"""A scripted HTTP/1.1 proxy on loopback, in front of a real server: each request is forwarded
(or not) and answered as its script says (the server's answer, a 503, a dropped connection), so
client tests see real failures of the network between them and memstream without mocking it."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import httpx

from tests.support.servers import free_port

# What the proxy does with one request:
#   "pass": forward it, answer the server's answer;
#   "forward-503": forward it (the server applies it), answer 503 instead of the server's answer;
#   "forward-drop": forward it, then close the connection without answering;
#   "503": answer 503 without forwarding; "drop": close the connection without forwarding.
ACTIONS = ("pass", "forward-503", "forward-drop", "503", "drop")
UNAVAILABLE = b'{"ok":false,"error":"log_unavailable: the proxy says so"}'


@dataclass
class Seen:
    path: str
    body: bytes
    action: str


@dataclass
class ScriptedProxy:
    """``ScriptedProxy(upstream, ["forward-503"])``: the first request is forwarded and answered
    503, every later one passes. ``seen`` lists the requests, ``connections`` counts the TCP
    connections clients opened."""

    upstream: str
    script: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        unknown = [a for a in self.script if a not in ACTIONS]
        if unknown:
            raise ValueError(f"unknown proxy actions {unknown}")
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._http: httpx.AsyncClient | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    async def _start(self) -> None:
        self._http = httpx.AsyncClient(base_url=self.upstream, timeout=60)
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._http is not None:
            await self._http.aclose()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                request_line, *lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {}
                for line in lines:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                action = self.script.pop(0) if self.script else "pass"
                self.seen.append(Seen(path, body, action))
                status, answer = 503, UNAVAILABLE
                if action in ("pass", "forward-503", "forward-drop"):
                    assert self._http is not None
                    keep = {k: v for k, v in headers.items() if k in ("content-type", "authorization", "x-client-id")}
                    response = await self._http.request(method, path, content=body, headers=keep)
                    if action == "pass":
                        status, answer = response.status_code, response.content
                if action in ("drop", "forward-drop"):
                    return
                reply = f"HTTP/1.1 {status} -\r\ncontent-type: application/json\r\ncontent-length: {len(answer)}\r\n"
                reply += "\r\n"
                writer.write(reply.encode() + answer)
                await writer.drain()
        finally:
            writer.close()


class TcpRelay:
    """A TCP relay on loopback to ``upstream_port``, bytes passed both ways untouched, that can
    cut every open connection at once (``cut()``): a network drop in the middle of a stream.
    ``sent`` holds what clients sent, chunk by chunk (request heads start chunks)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.sent: list[bytes] = []
        self._writers: list[asyncio.StreamWriter] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> TcpRelay:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def cut(self) -> None:
        """Close every connection open now, both sides."""
        asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(timeout=30)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _cut(self) -> None:
        writers, self._writers = self._writers, []
        for writer in writers:
            writer.close()

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, record: bool) -> None:
            try:
                while chunk := await src.read(65536):
                    if record:
                        self.sent.append(chunk)
                    dst.write(chunk)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))
