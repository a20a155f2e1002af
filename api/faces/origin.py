"""Browser-origin protection for every route of ``memstream serve`` (embedded and ``--kafka``).

A web page the user visits can send requests to a server on loopback: a ``text/plain`` POST
needs no CORS preflight, and DNS rebinding puts the page's own name in ``Host``. So requests
whose ``Host`` is not an allowed name, or whose ``Origin`` is another site, are refused (403),
and the tool and context routes take only JSON bodies (415), before anything runs or is
recorded. What is allowed and how to configure it: docs/security.md, "Browser origins".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from memstream.api.services.settings import Settings

log = logging.getLogger(__name__)

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# Binds that name no one address: what clients put in Host cannot be known from them.
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
# Where only JSON bodies are taken: a browser posts anything else without a preflight.
JSON_ONLY_PREFIXES = ("/v1/tools/", "/context/")


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def host_of(header: str) -> str | None:
    """The host name of a ``Host`` header (lowercased, port dropped, IPv6 unbracketed), or None
    when it is not one."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        host, rest = (value[1:end], value[end + 1 :]) if end > 0 else ("", "")
    elif value.count(":") > 1:  # an IPv6 address must be bracketed
        return None
    else:
        host, sep, port = value.partition(":")
        rest = sep + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return None
    host = host[:-1] if host.endswith(".") else host
    return host if host and " " not in host else None


def is_json(content_type: str | None) -> bool:
    """``application/json`` or an ``application/*+json`` type, with any parameters."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


@dataclass(frozen=True)
class OriginPolicy:
    """The Host names the server answers to, and the origins whose pages may call it."""

    hosts: frozenset[str]
    origins: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = (), *, bind: str = ""
    ) -> OriginPolicy:
        """Loopback names, the configured ones (settings are already normalised) and the bound
        address when it is one routable address or name (not a wildcard like ``0.0.0.0``)."""
        hosts = {*LOOPBACK_NAMES, *allowed_hosts}
        bound = host_of(bind) if bind not in WILDCARD_BINDS else None
        if bound is not None:
            hosts.add(bound)
        return cls(frozenset(hosts), frozenset(allowed_origins))

    def host_allowed(self, header: str | None) -> bool:
        host = host_of(header) if header else None
        return host is not None and host in self.hosts

    def origin_allowed(self, origin: str) -> bool:
        """A page of an allowed host (http or https, any port), or an origin named exactly."""
        value = origin.strip().lower()
        if value in self.origins:
            return True
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018  (raises on a malformed port)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or parts.path or parts.query or parts.username is not None:
            return False
        return parts.hostname is not None and parts.hostname.rstrip(".") in self.hosts

    def mcp_hosts(self) -> list[str]:
        """The allowed hosts as the MCP SDK's transport security spells them (``McpHttpApp``)."""
        names = sorted(_bracketed(h) for h in self.hosts)
        return [*names, *(f"{h}:*" for h in names)]

    def mcp_origins(self) -> list[str]:
        """The allowed origins as the MCP SDK's transport security spells them."""
        names = sorted(_bracketed(h) for h in self.hosts)
        own = [f"{s}://{h}{p}" for s in ("http", "https") for h in names for p in ("", ":*")]
        return [*own, *sorted(self.origins)]


def origin_policy(settings: Settings, bind: str) -> OriginPolicy:
    """The policy of a server bound to ``bind`` with these settings."""
    if bind in WILDCARD_BINDS and not settings.allowed_hosts:
        log.warning(
            "bound to %s with no MEMSTREAM_ALLOWED_HOSTS: only requests naming a loopback host are answered; "
            "list the names clients use (docs/security.md, 'Browser origins')",
            bind or "every interface",
        )
    return OriginPolicy.of(settings.allowed_hosts, settings.allowed_origins, bind=bind)


class OriginGuard:
    """ASGI middleware, outermost: 403 for a Host or Origin outside the policy, 415 for a body
    that is not JSON on the tool and context routes. Nothing behind it sees such a request."""

    def __init__(self, app: ASGIApp, policy: OriginPolicy, json_only: tuple[str, ...] = JSON_ONLY_PREFIXES) -> None:
        self.app = app
        self.policy = policy
        self.json_only = json_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refused = self.refusal(scope, headers)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, why = refused
        log.info("%d on %s %s: %s", status, scope.get("method", "WS"), scope.get("path"), why)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = orjson.dumps({"ok": False, "error": why})
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def refusal(self, scope: Scope, headers: Headers) -> tuple[int, str] | None:
        host = headers.get("host")
        if not self.policy.host_allowed(host):
            return 403, f"forbidden: Host {_shown(host)} is not an allowed host name (MEMSTREAM_ALLOWED_HOSTS)"
        origin = headers.get("origin")
        if origin is not None and not self.policy.origin_allowed(origin):
            return 403, f"forbidden: Origin {_shown(origin)} is not allowed (MEMSTREAM_ALLOWED_ORIGINS)"
        path = str(scope.get("path") or "")
        if scope.get("method") == "POST" and path.startswith(self.json_only):
            content_type = headers.get("content-type")
            if not is_json(content_type):
                return 415, f"unsupported_media_type: send the body as application/json, not {_shown(content_type)}"
        return None


def _shown(value: Any) -> str:
    """A header value quoted for an error message, bounded."""
    if value is None:
        return "(none)"
    text = str(value)
    return repr(text if len(text) <= 100 else text[:100] + "…")
