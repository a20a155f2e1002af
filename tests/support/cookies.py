"""What the login tests of the browser pages (audit page, console) read of cookies: a client that
keeps none (each request carries exactly the ones the test gives it) and a response's Set-Cookie
headers, by name."""

from __future__ import annotations

from http.cookiejar import DefaultCookiePolicy

import httpx


def cookieless_client(url: str) -> httpx.Client:
    http = httpx.Client(base_url=url, timeout=30)
    http.cookies.jar.set_policy(DefaultCookiePolicy(allowed_domains=[]))
    return http


def set_cookies(r: httpx.Response) -> dict[str, str]:
    """The Set-Cookie headers of a response, by cookie name."""
    return {h.split("=", 1)[0]: h for h in r.headers.get_list("set-cookie")}


def cookie_value(set_cookie: str) -> str:
    return set_cookie.split(";", 1)[0].split("=", 1)[1]


def assert_strict(set_cookie: str, path: str) -> None:
    """HttpOnly, SameSite=Strict and on ``path``."""
    attributes = {a.strip().lower() for a in set_cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", f"path={path}"} <= attributes, set_cookie
