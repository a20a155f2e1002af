"""HTTP embedding backend: ``POST {url}`` with ``{"texts": [...]}`` → ``{"embeddings": [[...]]}``.

This is the protocol CPersona's ``CPERSONA_EMBEDDING_MODE=http`` speaks, so a benchmark can point
memstream and CPersona at one ``bench/embed_server.py`` and compare them on the same model.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import orjson

from .errors import EmbeddingError

if TYPE_CHECKING:
    import httpx  # imported when a client is made: a server on a local model never loads it

__all__ = ["MAX_BATCH", "HttpEmbedder"]

MAX_BATCH = 64  # texts per request
_PROBE_TEXT = "dimension probe"


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise EmbeddingError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise EmbeddingError(f"{name} must be > 0, got {raw!r}")
    return value


class HttpEmbedder:
    """Thread-safe client for an ``/embed`` server.

    ``model_id`` is ``http:<url>`` unless ``model_id`` (or env ``MEMSTREAM_EMBEDDING_MODEL_ID``)
    names the model. ``dim`` comes from ``dim`` / env ``MEMSTREAM_EMBEDDING_DIM`` when given (and
    every response is then checked against it); otherwise the first response fixes it (reading
    ``.dim`` before any call sends a one-text probe). Rows are L2-normalised on arrival; an
    all-zero row stays zero.
    """

    def __init__(
        self,
        url: str,
        *,
        model_id: str | None = None,
        dim: int | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        batch_size: int = MAX_BATCH,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not url or not url.startswith(("http://", "https://")):
            raise EmbeddingError(f"embedding URL must start with http:// or https://, got {url!r}")
        self.url = url
        self.model_id = model_id or os.environ.get("MEMSTREAM_EMBEDDING_MODEL_ID") or f"http:{url}"
        if dim is None:
            raw = os.environ.get("MEMSTREAM_EMBEDDING_DIM")
            if raw:
                try:
                    dim = int(raw)
                except ValueError:
                    raise EmbeddingError(f"MEMSTREAM_EMBEDDING_DIM must be an integer, got {raw!r}") from None
        if dim is not None and dim < 1:
            raise EmbeddingError(f"embedding dimension must be >= 1, got {dim}")
        self._dim: int | None = dim
        self._dim_lock = threading.Lock()
        self.batch_size = max(1, min(MAX_BATCH, batch_size))
        read = timeout if timeout is not None else _env_float("MEMSTREAM_EMBEDDING_TIMEOUT", 60.0)
        connect = connect_timeout if connect_timeout is not None else min(5.0, read)
        import httpx

        self._client = httpx.Client(
            timeout=httpx.Timeout(read, connect=connect),
            headers={"content-type": "application/json", "accept": "application/json"},
            transport=transport,
            trust_env=False,  # never route loopback embedding traffic through a proxy
        )

    def __repr__(self) -> str:
        return f"HttpEmbedder(url={self.url!r}, model_id={self.model_id!r}, dim={self._dim})"

    # -- dimension -----------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        if self._dim is None:
            self._post([_PROBE_TEXT])  # fixes self._dim
        assert self._dim is not None
        return self._dim

    def _check_dim(self, got: int) -> None:
        with self._dim_lock:
            if self._dim is None:
                self._dim = got
                return
            expected = self._dim
        if got != expected:
            raise EmbeddingError(f"{self.url}: server returned {got}-d vectors, expected {expected}-d")

    # -- requests ------------------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        texts = list(texts)
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"embed() texts must be str, got {type(t).__name__}")
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        parts = [self._post(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def _post(self, texts: list[str]) -> np.ndarray:
        import httpx

        try:
            resp = self._client.post(self.url, content=orjson.dumps({"texts": texts}))
        except httpx.TimeoutException as exc:
            raise EmbeddingError(f"embedding server {self.url} timed out: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"embedding server {self.url} unreachable: {exc!r}") from exc
        if not 200 <= resp.status_code < 300:
            snippet = resp.text[:200].replace("\n", " ")
            raise EmbeddingError(f"embedding server {self.url} answered HTTP {resp.status_code}: {snippet}")
        try:
            payload = orjson.loads(resp.content)
        except orjson.JSONDecodeError as exc:
            raise EmbeddingError(f"embedding server {self.url} sent malformed JSON: {exc}") from exc
        rows = payload.get("embeddings") if isinstance(payload, dict) else None
        if not isinstance(rows, list):
            raise EmbeddingError(f"embedding server {self.url}: response has no 'embeddings' list")
        if len(rows) != len(texts):
            raise EmbeddingError(f"embedding server {self.url} returned {len(rows)} vectors for {len(texts)} texts")
        if not all(isinstance(r, list) for r in rows):
            raise EmbeddingError(f"embedding server {self.url}: 'embeddings' must be a list of lists of numbers")
        width = len(rows[0])
        if width == 0 or any(len(r) != width for r in rows):
            raise EmbeddingError(f"embedding server {self.url}: vectors are empty or of unequal length")
        try:
            with np.errstate(over="ignore"):  # out-of-range values become inf, rejected below
                arr = np.array(rows, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(f"embedding server {self.url}: non-numeric vector values ({exc})") from exc
        if arr.ndim != 2 or not np.isfinite(arr).all():
            raise EmbeddingError(f"embedding server {self.url}: vectors contain non-finite or nested values")
        self._check_dim(width)
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        arr /= np.where(norms > 0, norms, 1.0)
        return arr

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
