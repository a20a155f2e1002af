"""What ``memstream serve`` says on stderr once it listens: where (the URL, MCP, the API docs, the
console), on what (data directory or Kafka deployment) and with which access control."""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import uvicorn

from memstream.api.services.logs import JsonFormatter


@dataclass(frozen=True)
class Served:
    """What the banner describes besides the address: the mode and the access control."""

    mode: str  # "embedded" or "kafka"
    data: str  # the data directory, or the Kafka deployment (bootstrap, topic prefix, partitions)
    acl_file: Path | None


def base_url(host: str, port: int) -> str:
    """The URL a client on this machine uses: an unspecified address (all interfaces) is
    reached at loopback; an IPv6 literal goes in brackets."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def banner(url: str, paths: set[str], served: Served) -> list[tuple[str, str]]:
    """What to say, label by label: a page is named only if the app serves it (the Kafka router
    has no /docs; the console is wherever `/` is served)."""
    where = [("MCP (streamable HTTP)", f"{url}/mcp"), ("HTTP tools", f"{url}/v1/tools/<name>")]
    if "/docs" in paths:
        where.append(("API docs", f"{url}/docs"))
    if "/" in paths:
        where.append(("console", f"{url}/"))
    if served.mode == "kafka":
        where.append(("mode", "Kafka router: each call goes to the `memstream worker` owning its agent"))
        where.append(("Kafka", served.data))
    else:
        where.append(("mode", "embedded (one SQLite log)"))
        where.append(("data directory", served.data))
    if served.acl_file is None:
        where.append(("access control", "off: every caller reaches every agent (no MEMSTREAM_ACL_FILE)"))
    else:
        where.append(("access control", f"on: bearer tokens from {served.acl_file}"))
    return where


def as_text(url: str, where: list[tuple[str, str]]) -> str:
    width = max(len(label) for label, _ in where) + 1
    return "\n".join([f"memstream is listening on {url}", *(f"  {label + ':':<{width}} {v}" for label, v in where)])


def announce(url: str, where: list[tuple[str, str]]) -> None:
    """Text lines for a person; with JSON logs (MEMSTREAM_LOG_FORMAT=json) one log record whose
    fields are the banner's (``mcp``, ``api_docs``, ``data_directory`` …), so stderr stays JSON lines."""
    if any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers):
        fields = {label.split(" (")[0].lower().replace(" ", "_"): value for label, value in where}
        logger = logging.getLogger("memstream")
        msg, extra = "memstream is listening on %s", {"url": url, **fields}
        # handle(), not info(): printed whatever --log-level says, as the text banner is.
        logger.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 0, msg, (url,), None, extra=extra))
    else:
        click.echo(as_text(url, where), err=True)


def route_paths(app: Any) -> set[str]:
    """The paths an ASGI app routes (Starlette and FastAPI keep them in ``app.routes``)."""
    return {path for route in getattr(app, "routes", []) if isinstance(path := getattr(route, "path", None), str)}


class AnnouncingServer(uvicorn.Server):
    """uvicorn's server, calling ``announce`` with the address it bound once it accepts
    connections (after the app's startup, so the engine is up and the port is real, also
    with --port 0)."""

    def __init__(self, config: uvicorn.Config, announce: Callable[[str, int], None]) -> None:
        super().__init__(config)
        self.announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit:
            host, port = bound_address(self.servers, self.config.host)
            self.announce(host, port)


def bound_address(servers: Sequence[Any], configured_host: str) -> tuple[str, int]:
    """The configured host and the port the first listening socket got."""
    for server in servers:
        for sock in server.sockets:
            name = sock.getsockname()
            if isinstance(name, tuple):
                return configured_host, int(name[1])
    raise RuntimeError("uvicorn started without a listening socket")


def serve_app(app: Any, host: str, port: int, served: Served) -> None:
    """Run ``app`` under uvicorn as ``uvicorn.run`` would, printing the banner to stderr once it
    listens; exit 3 (uvicorn's start-up failure) if it never did."""
    paths = route_paths(app)

    def listening(bound_host: str, bound_port: int) -> None:
        url = base_url(bound_host, bound_port)
        announce(url, banner(url, paths, served))

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = AnnouncingServer(config, listening)
    server.run()
    if not server.started:
        sys.exit(3)
