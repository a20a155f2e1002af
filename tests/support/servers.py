"""Real servers on loopback for the tests: a free port, an HTTP/MCP server in a thread, its log's end."""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

from memstream.api.services.settings import Settings
from tests.support.embedders import HashEmbedder


def free_port() -> int:
    """A port free now, for a server a test starts in a moment. Taken below the kernel's
    ephemeral range where there is room: a port from ``bind(0)`` is released at once and the
    kernel may hand it to any process binding port 0 or connecting out (in one CI run a Kafka
    worker's HTTP server took the port meant for its router) before the server binds it."""
    span = _below_ephemeral()
    if span is not None:
        for _ in range(200):
            port = random.randint(*span)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:  # no room below the range (or all taken): the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _below_ephemeral() -> tuple[int, int] | None:
    """Ports no ``bind(0)`` or outgoing connection gets: from 20000 up to the start of
    ip_local_port_range (32768 by default), above the usual fixed ones (Kafka's 9092, 9192)."""
    try:
        start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return (20000, start - 1) if start > 21000 else None


class ServerThread:
    """A real uvicorn server on 127.0.0.1 in a thread of its own, stopped by the fixture."""

    def __init__(self, settings: Settings) -> None:
        import uvicorn

        from memstream.api.faces.http import create_app

        self.port = free_port()
        self.app = create_app(settings, embedder=HashEmbedder())
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = 30.0
        step = 0.02
        waited = 0.0
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server thread died during start-up")
            if waited > deadline:
                raise TimeoutError("the server did not start within 30 s")
            threading.Event().wait(step)
            waited += step
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def log_end(server: ServerThread) -> tuple[int, int]:
    """(event log end, audit end) of the server's data directory, read through a second handle."""
    from memstream.streams.log.sqlite import SqliteLog

    log = SqliteLog(server.app.state.engine.settings.log_path)
    try:
        return log.end_offset(), log.audit_end_offset()
    finally:
        log.close()
