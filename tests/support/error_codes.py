"""An httpx transport that records each answer's ``Memstream-Error`` header, so client tests see
which failure code the server named, beside the exception class the client raised from it."""

from __future__ import annotations

import httpx


class HeaderRecorder(httpx.HTTPTransport):
    """``Client(url, transport=HeaderRecorder())``: ``codes`` lists each answer's named code."""

    def __init__(self) -> None:
        super().__init__()
        self.codes: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.codes.append(response.headers.get("memstream-error"))
        return response
