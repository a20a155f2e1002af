"""Audit page logins in ACL mode: a browser cannot send a bearer token, so the login form
exchanges one for a session cookie (docs/security.md, "The audit page in ACL mode").

Sessions live in this process only: the cookie carries a random id and its HMAC under a key
made at start-up, so a forged or altered cookie is refused before any lookup; a session ends
when it expires or on logout (the id is forgotten, so its cookie no longer opens anything),
and all end with the process. Every form that changes state carries a CSRF token: the
session's own on logout, and on login (no session yet) the HMAC of a nonce kept in a cookie
of its own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

SESSION_COOKIE = "memstream_audit"
LOGIN_COOKIE = "memstream_audit_login"
COOKIE_PATH = "/audit"
LOGIN_NONCE_S = 3_600  # a login form stays usable this long
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class Session:
    sid: str
    client_id: str
    csrf: str
    expires: float


class AuditSessions:
    """Signed, expiring session cookies for the audit page, and the login form's CSRF tokens."""

    def __init__(
        self, lifetime_s: float, *, clock: Callable[[], float] = time.monotonic, key: bytes | None = None
    ) -> None:
        self.lifetime_s = lifetime_s
        self._clock = clock
        self._key = key if key is not None else secrets.token_bytes(32)
        self._live: dict[str, Session] = {}

    def _mac(self, purpose: str, value: str) -> str:
        digest = hmac.new(self._key, f"{purpose}:{value}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    # -- sessions ---------------------------------------------------------------------------------

    def open(self, client_id: str) -> tuple[Session, str]:
        """A new session of ``client_id`` and the cookie value that names it."""
        now = self._clock()
        self._forget_expired(now)
        while len(self._live) >= MAX_SESSIONS:  # the oldest goes first (dicts keep insertion order)
            self._live.pop(next(iter(self._live)))
        sid = secrets.token_urlsafe(32)
        session = Session(sid, client_id, secrets.token_urlsafe(32), now + self.lifetime_s)
        self._live[sid] = session
        return session, f"{sid}.{self._mac('session', sid)}"

    def resolve(self, cookie: str | None) -> Session | None:
        """The live session a cookie value names; None if forged, unknown, expired or closed."""
        if not cookie:
            return None
        sid, _, mac = cookie.partition(".")
        if not sid or not hmac.compare_digest(mac.encode(), self._mac("session", sid).encode()):
            return None
        session = self._live.get(sid)
        if session is None:
            return None
        if self._clock() >= session.expires:
            self._live.pop(sid, None)
            return None
        return session

    def close(self, session: Session) -> None:
        self._live.pop(session.sid, None)

    def _forget_expired(self, now: float) -> None:
        for sid in [sid for sid, s in self._live.items() if now >= s.expires]:
            del self._live[sid]

    # -- the login form's CSRF token --------------------------------------------------------------

    def login_nonce(self) -> tuple[str, str]:
        """(cookie value, form token) for one login form."""
        nonce = f"{int(self._clock())}.{secrets.token_urlsafe(24)}"
        return nonce, self._mac("login", nonce)

    def login_token_ok(self, cookie: str | None, token: str | None) -> bool:
        """The form's token is the one made for the nonce in the browser's cookie, not too old."""
        if not cookie or not token:
            return False
        issued, _, _ = cookie.partition(".")
        if not issued.isdigit() or self._clock() - int(issued) > LOGIN_NONCE_S:
            return False
        return hmac.compare_digest(token.encode(), self._mac("login", cookie).encode())

    @staticmethod
    def csrf_ok(session: Session, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), session.csrf.encode())
