"""The rules behind browser-origin protection and the audit page's login (issue 17, items 1 and
2), without a server: which Host names and origins are allowed, which bodies count as JSON,
how MEMSTREAM_ALLOWED_HOSTS / _ORIGINS are read, and how audit sessions sign, expire and end.
The servers applying them: tests/system/test_origin.py, tests/system/test_audit_page.py."""

from __future__ import annotations

import pytest

from memstream.api.faces.origin import OriginPolicy, host_of, is_json
from memstream.api.faces.sessions import LOGIN_NONCE_S, AuditSessions
from memstream.api.services.settings import SettingsError, load_settings


def test_host_header_parsing() -> None:
    assert host_of("LocalHost:8765") == "localhost"
    assert host_of("[::1]:80") == "::1"
    assert host_of("[::1]") == "::1"
    assert host_of("127.0.0.1") == "127.0.0.1"
    assert host_of("localhost.") == "localhost"
    for bad in ("", "localhost:http", "[::1]x", "[::1", "a b", "localhost:80:80x"):
        assert host_of(bad) is None, bad


def test_default_policy_is_loopback_and_the_bound_address() -> None:
    policy = OriginPolicy.of()
    for host in ("localhost", "localhost:1", "127.0.0.1:8765", "[::1]:8765"):
        assert policy.host_allowed(host), host
    for host in (None, "", "evil.example", "evil.example:8765", "127.0.0.1.evil.example", "localhost.evil", "10.0.0.1"):
        assert not policy.host_allowed(host), host
    assert OriginPolicy.of(bind="10.0.0.1").host_allowed("10.0.0.1:8765")
    assert OriginPolicy.of(bind="memstream.lan").host_allowed("memstream.lan")
    for wildcard in ("0.0.0.0", "::"):  # what clients call a wildcard bind cannot be known
        assert OriginPolicy.of(bind=wildcard).hosts == OriginPolicy.of().hosts


def test_origins_of_allowed_hosts_or_named_exactly() -> None:
    policy = OriginPolicy.of(["memstream.lan"], ["https://console.example"])
    for origin in ("http://localhost:3000", "https://127.0.0.1", "http://[::1]:8765", "http://memstream.lan:8765"):
        assert policy.origin_allowed(origin), origin
    assert policy.origin_allowed("https://console.example")
    for origin in (
        "null",
        "http://evil.example",
        "https://console.example:8443",
        "http://console.example",
        "ftp://localhost",
        "http://localhost:99999",
        "http://user@localhost",
        "http://localhost/path",
        "localhost",
    ):
        assert not policy.origin_allowed(origin), origin


def test_mcp_spelling_of_the_same_allowlist() -> None:
    policy = OriginPolicy.of(["memstream.lan"], ["https://console.example"])
    assert {"memstream.lan", "memstream.lan:*", "[::1]:*", "127.0.0.1"} <= set(policy.mcp_hosts())
    assert {"http://memstream.lan:*", "https://[::1]", "https://console.example"} <= set(policy.mcp_origins())


def test_json_content_types() -> None:
    for kind in ("application/json", "Application/JSON; charset=utf-8", "application/merge-patch+json"):
        assert is_json(kind), kind
    for kind in (None, "", "text/plain", "text/json", "application/x-www-form-urlencoded", "multipart/form-data"):
        assert not is_json(kind), kind


def test_allowed_hosts_and_origins_settings() -> None:
    s = load_settings(
        env={
            "MEMSTREAM_ALLOWED_HOSTS": " Memstream.LAN , [fd00::1],10.0.0.2,",
            "MEMSTREAM_ALLOWED_ORIGINS": "https://A.example/",
        }
    )
    assert s.allowed_hosts == ("memstream.lan", "fd00::1", "10.0.0.2")
    assert s.allowed_origins == ("https://a.example",)
    assert load_settings(env={}).allowed_hosts == ()
    for var, value in (
        ("MEMSTREAM_ALLOWED_HOSTS", "http://memstream.lan"),
        ("MEMSTREAM_ALLOWED_HOSTS", "memstream.lan:8765"),
        ("MEMSTREAM_ALLOWED_HOSTS", "*.example"),
        ("MEMSTREAM_ALLOWED_ORIGINS", "console.example"),
        ("MEMSTREAM_ALLOWED_ORIGINS", "https://console.example/app"),
        ("MEMSTREAM_ALLOWED_ORIGINS", "*"),
    ):
        with pytest.raises(SettingsError, match=var):
            load_settings(env={var: value})


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_sessions_are_signed_expire_and_end_on_logout() -> None:
    clock = Clock()
    sessions = AuditSessions(60, clock=clock)
    session, cookie = sessions.open("rw-alice")
    assert sessions.resolve(cookie) == session and session.client_id == "rw-alice"
    sid, _, mac = cookie.partition(".")
    altered = mac[:-1] + ("B" if mac.endswith("A") else "A")
    for forged in ("", sid, f"{sid}.", f"{sid}.{altered}", f"x{sid}.{mac}", cookie + "x"):
        assert sessions.resolve(forged) is None, forged
    assert AuditSessions(60, clock=clock).resolve(cookie) is None  # another process's key
    clock.now += 59
    assert sessions.resolve(cookie) == session
    clock.now += 1
    assert sessions.resolve(cookie) is None  # expired, and forgotten
    clock.now += 1_000
    assert sessions.resolve(cookie) is None
    other, other_cookie = sessions.open("admin")
    sessions.close(other)
    assert sessions.resolve(other_cookie) is None  # logged out: the cookie opens nothing
    assert sessions.csrf_ok(session, session.csrf) and not sessions.csrf_ok(session, None)
    assert not sessions.csrf_ok(session, other.csrf)


def test_login_form_token_is_bound_to_its_cookie_and_ages() -> None:
    clock = Clock()
    sessions = AuditSessions(60, clock=clock)
    nonce, token = sessions.login_nonce()
    assert sessions.login_token_ok(nonce, token)
    other_nonce, other_token = sessions.login_nonce()
    assert not sessions.login_token_ok(nonce, other_token) and not sessions.login_token_ok(other_nonce, token)
    for cookie, field in ((None, token), (nonce, None), ("", ""), ("x.y", token), (nonce, token + "x")):
        assert not sessions.login_token_ok(cookie, field), (cookie, field)
    clock.now += LOGIN_NONCE_S + 1
    assert not sessions.login_token_ok(nonce, token)
