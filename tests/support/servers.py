"""Real servers on loopback for the tests: a free port, an HTTP/MCP server in a thread, its log's end."""

from __future__ import annotations

import socket
import threading

from memstream.api.services.settings import Settings
from tests.support.embedders import HashEmbedder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
