"""A small standalone ``/embed`` server, so memstream and CPersona can share one embedding model.

    python bench/embed_server.py --port 8089                 # default model, 127.0.0.1:8089
    python bench/embed_server.py --port 0 --model wordllama-l2-256   # ephemeral port
    python bench/embed_server.py --port 0 --precomputed vecs.npz     # answer known texts from a table

Protocol (what memstream's HttpEmbedder and CPersona's ``CPERSONA_EMBEDDING_MODE=http`` speak):

    POST /embed   {"texts": ["...", ...]}  ->  200 {"embeddings": [[...], ...], "model": ID, "dim": N}
    GET  /health                           ->  200 {"status": "ok", "model": ID, "dim": N, counters}

Vectors are unit-norm float32 values. ``--precomputed FILE.npz`` (arrays ``texts``, ``vectors`` and
``model``, the id of the model that computed them; it must equal the served model's) answers every
text found in that table from the table and embeds the rest live, in one batch per request; the
``/health`` answer then counts table hits, live misses and the seconds spent embedding live. Use it
only with vectors the same model computed (benchmarks that precomputed their corpus), so a client
that stores a known corpus measures itself rather than this server's model.

Errors: 400 (bad JSON or schema), 404, 413 (more than ``--max-texts`` texts or a body over
16 MiB), 500 (the model failed). Binds loopback only. Once listening it prints
``listening on http://HOST:PORT/embed`` on stdout; SIGTERM/SIGINT stop it.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import orjson

from memstream.api.services.embedding import DEFAULT_EMBEDDER, Embedder, EmbeddingError, load_local_embedder

MAX_BODY = 16 * 1024 * 1024


class EmbedServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        embedder: Embedder,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        path: str = "/embed",
        max_texts: int = 1024,
        verbose: bool = False,
        precomputed: dict[str, np.ndarray] | None = None,
    ) -> None:
        if not _is_loopback(host):
            raise ValueError(f"refusing to bind {host!r}: the embed server listens on loopback only")
        self.embedder = embedder
        self.route = path
        self.max_texts = max_texts
        self.verbose = verbose
        self.batch_sizes: list[int] = []  # texts per served /embed request (tests, diagnostics)
        self.precomputed = precomputed  # text -> vector of the same model, or None
        self.table_hits = 0
        self.live_misses = 0
        self.live_seconds = 0.0
        self._stats_lock = threading.Lock()
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}{self.route}"

    def record(self, n: int) -> None:
        with self._stats_lock:
            self.batch_sizes.append(n)

    def embed(self, texts: list[str]) -> np.ndarray:
        """The vectors of ``texts``: from the precomputed table where it has them, else live."""
        table = self.precomputed
        if table is None:
            t0 = time.perf_counter()
            out = self.embedder.embed(texts)
            self._count(0, len(texts), time.perf_counter() - t0)
            return out
        rows = [table.get(t) for t in texts]
        miss = [i for i, r in enumerate(rows) if r is None]
        live_s = 0.0
        if miss:
            t0 = time.perf_counter()
            live = np.asarray(self.embedder.embed([texts[i] for i in miss]), dtype=np.float32)
            live_s = time.perf_counter() - t0
            for j, i in enumerate(miss):
                rows[i] = live[j]
        self._count(len(texts) - len(miss), len(miss), live_s)
        if not rows:
            return np.zeros((0, self.embedder.dim), np.float32)
        return np.stack(rows).astype(np.float32, copy=False)

    def _count(self, hits: int, misses: int, live_s: float) -> None:
        with self._stats_lock:
            self.table_hits += hits
            self.live_misses += misses
            self.live_seconds += live_s

    def counters(self) -> dict:
        with self._stats_lock:
            return {
                "precomputed_rows": len(self.precomputed) if self.precomputed is not None else 0,
                "table_hits": self.table_hits,
                "live_misses": self.live_misses,
                "live_seconds": round(self.live_seconds, 3),
                "requests": len(self.batch_sizes),
            }


def load_precomputed(path: str, model_id: str) -> dict[str, np.ndarray]:
    """text -> vector from an .npz with ``texts``, ``vectors`` and ``model`` (must be ``model_id``)."""
    with np.load(path, allow_pickle=False) as z:
        model = str(z["model"])
        if model != model_id:
            raise ValueError(f"{path}: vectors of model {model!r}, but this server embeds with {model_id!r}")
        texts = [str(t) for t in z["texts"]]
        vectors = np.asarray(z["vectors"], dtype=np.float32)
    if len(texts) != len(vectors):
        raise ValueError(f"{path}: {len(texts)} texts but {len(vectors)} vectors")
    return dict(zip(texts, vectors, strict=True))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Handler(BaseHTTPRequestHandler):
    server: EmbedServer
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse one connection
    # Headers and body go out in two sends: without TCP_NODELAY the second waits for the
    # client's delayed ACK, adding ~40 ms to every answer (measured: p50 44 ms vs 0.55 ms).
    disable_nagle_algorithm = True

    def log_message(self, fmt: str, *args: object) -> None:
        if self.server.verbose:
            super().log_message(fmt, *args)

    def _send(self, status: int, payload: dict) -> None:
        body = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.split("?")[0] in ("/health", "/healthz"):
            emb = self.server.embedder
            self._send(200, {"status": "ok", "model": emb.model_id, "dim": emb.dim, **self.server.counters()})
        else:
            self._send(404, {"error": f"no route GET {self.path}"})

    def do_POST(self) -> None:
        if self.path.split("?")[0] != self.server.route:
            self._drain()
            self._send(404, {"error": f"no route POST {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            self.close_connection = True
            self._send(400, {"error": "bad Content-Length"})
            return
        if length > MAX_BODY:
            self.close_connection = True
            self._send(413, {"error": f"body over {MAX_BODY} bytes"})
            return
        try:
            payload = orjson.loads(self.rfile.read(length))
        except orjson.JSONDecodeError as exc:
            self._send(400, {"error": f"malformed JSON: {exc}"})
            return
        texts = payload.get("texts") if isinstance(payload, dict) else None
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            self._send(400, {"error": 'expected {"texts": [string, ...]}'})
            return
        if len(texts) > self.server.max_texts:
            self._send(413, {"error": f"at most {self.server.max_texts} texts per request"})
            return
        emb = self.server.embedder
        try:
            vectors = self.server.embed(texts)
        except EmbeddingError as exc:
            self._send(500, {"error": str(exc)})
            return
        self.server.record(len(texts))
        self._send(200, {"embeddings": vectors, "model": emb.model_id, "dim": emb.dim})

    def _drain(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = 0
        if 0 < length <= MAX_BODY:
            self.rfile.read(length)


def serve_in_thread(server: EmbedServer) -> threading.Thread:
    """Start ``server.serve_forever`` in a daemon thread (stop with ``server.shutdown()``)."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve a memstream embedder over HTTP (loopback only).")
    ap.add_argument("--port", type=int, default=8089, help="0 picks a free port (printed on stdout)")
    ap.add_argument("--host", default="127.0.0.1", help="a loopback address")
    ap.add_argument(
        "--model", default=None, help=f"embedder name (default: env MEMSTREAM_EMBEDDER or {DEFAULT_EMBEDDER})"
    )
    ap.add_argument("--path", default="/embed")
    ap.add_argument("--max-texts", type=int, default=1024)
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    ap.add_argument(
        "--precomputed",
        default=None,
        help="an .npz (texts, vectors, model) of this model's vectors: known texts are answered from it",
    )
    args = ap.parse_args(argv)
    try:
        embedder = load_local_embedder(args.model)  # ignores MEMSTREAM_EMBEDDING_URL: this *is* the server
    except EmbeddingError as exc:
        print(f"embed_server: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    embedder.embed(["warm-up"])
    table = None
    if args.precomputed:
        try:
            table = load_precomputed(args.precomputed, embedder.model_id)
        except (OSError, ValueError, KeyError) as exc:
            print(f"embed_server: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    server = EmbedServer(
        embedder,
        args.host,
        args.port,
        path=args.path,
        max_texts=args.max_texts,
        verbose=args.verbose,
        precomputed=table,
    )

    def _stop(signum: int, frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    extra = f" precomputed={len(table)}" if table is not None else ""
    print(f"listening on {server.url} model={embedder.model_id} dim={embedder.dim}{extra}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
