"""Embedder layer: the default offline model, the HTTP backend and bench/embed_server.py.

Servers bind 127.0.0.1 on ephemeral ports, readiness is awaited with deadlines, and everything a
test starts is stopped by the test's fixture.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest

from memstream.api.services.embedding import (
    Embedder,
    EmbeddingError,
    HttpEmbedder,
    load_embedder,
)
from tests.support.embedding import ENV_VARS

ROOT = Path(__file__).resolve().parents[2]
SERVER_SCRIPT = ROOT / "bench" / "embed_server.py"

pytestmark = pytest.mark.usefixtures("clean_embedding_env")


@pytest.fixture(scope="module")
def model(default_model: Embedder) -> Embedder:
    return default_model


def _load_server_module():
    spec = importlib.util.spec_from_file_location("memstream_bench_embed_server", SERVER_SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


# -- HTTP backend against bench/embed_server.py -------------------------------------------------


@pytest.fixture(scope="module")
def embed_server(model):
    mod = _load_server_module()
    server = mod.EmbedServer(model, "127.0.0.1", 0)
    thread = mod.serve_in_thread(server)
    try:
        _wait_healthy(server.url.rsplit("/", 1)[0] + "/health", deadline_s=30)
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _wait_healthy(url: str, deadline_s: float, proc: subprocess.Popen | None = None) -> dict:
    deadline = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"server exited early with {proc.returncode}")
        try:
            r = httpx.get(url, timeout=2.0, trust_env=False)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.05)  # poll interval, bounded by the deadline
    raise AssertionError(f"{url} not healthy within {deadline_s}s: {last!r}")


def test_http_matches_local_model(embed_server, model):
    emb = load_embedder(url=embed_server.url)
    assert isinstance(emb, HttpEmbedder)
    assert emb.model_id == f"http:{embed_server.url}"
    assert emb.dim == 384
    texts = ["A man is eating food.", "", "The stock market fell sharply today."]
    out = emb.embed(texts)
    assert out.shape == (3, 384) and out.dtype == np.float32
    np.testing.assert_allclose(out, model.embed(texts), atol=1e-5)
    assert emb.embed([]).shape == (0, 384)
    emb.close()


def test_http_from_env_with_model_id_and_batching(embed_server, monkeypatch, model):
    monkeypatch.setenv("MEMSTREAM_EMBEDDING_URL", embed_server.url)
    monkeypatch.setenv("MEMSTREAM_EMBEDDING_MODEL_ID", "minilm-l6-v2-int8")
    monkeypatch.setenv("MEMSTREAM_EMBEDDER", "no-such-model")  # the URL wins
    emb = load_embedder()
    assert isinstance(emb, HttpEmbedder) and emb.model_id == "minilm-l6-v2-int8"
    texts = [f"memory {i}: the user mentioned item {i}" for i in range(150)]
    before = len(embed_server.batch_sizes)
    out = emb.embed(texts)
    sizes = embed_server.batch_sizes[before:]
    assert sizes == [64, 64, 22]
    np.testing.assert_allclose(out, model.embed(texts), atol=1e-5)
    emb.close()


def test_http_dim_from_env_is_enforced(embed_server, monkeypatch):
    monkeypatch.setenv("MEMSTREAM_EMBEDDING_DIM", "256")
    emb = HttpEmbedder(embed_server.url)
    assert emb.dim == 256  # configured, not probed
    with pytest.raises(EmbeddingError, match="384-d vectors, expected 256-d"):
        emb.embed(["hello"])
    emb.close()


def test_embed_server_script_end_to_end(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env["MEMSTREAM_EMBEDDING_URL"] = "http://127.0.0.1:9/must-be-ignored-by-the-server"
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        line = _readline_with_deadline(proc, deadline_s=60)
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.split()[2]
        health = _wait_healthy(url.rsplit("/", 1)[0] + "/health", deadline_s=30, proc=proc)
        assert {k: health[k] for k in ("status", "model", "dim")} == {
            "status": "ok",
            "model": "minilm-l6-v2-int8",
            "dim": 384,
        }
        assert health["live_misses"] == 0 and health["precomputed_rows"] == 0  # no table: everything live
        r = httpx.post(url, json={"texts": ["a", "b"]}, timeout=30, trust_env=False)
        body = r.json()
        assert r.status_code == 200 and len(body["embeddings"]) == 2 and len(body["embeddings"][0]) == 384
        assert httpx.post(url, content=b"{oops", timeout=30, trust_env=False).status_code == 400
        assert httpx.post(url, json={"texts": [1]}, timeout=30, trust_env=False).status_code == 400
        assert httpx.post(url + "x", json={"texts": []}, timeout=30, trust_env=False).status_code == 404
        emb = load_embedder(url=url)
        assert emb.embed(["hello"]).shape == (1, 384)
        emb.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""


def _readline_with_deadline(proc: subprocess.Popen, deadline_s: float) -> str:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout=deadline_s)
    if not result or not result[0]:
        proc.kill()
        raise AssertionError(f"server printed nothing within {deadline_s}s: {proc.stderr.read()[-2000:]}")
    return result[0].strip()


def test_server_refuses_non_loopback(model):
    mod = _load_server_module()
    with pytest.raises(ValueError, match="loopback"):
        mod.EmbedServer(model, "0.0.0.0", 0)


# -- HTTP error cases --------------------------------------------------------------------------


class _FaultHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        texts = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["texts"]
        mode = self.server.mode
        if mode == "slow":
            self.server.release.wait(timeout=10)
        status, ctype, body = 200, "application/json", None
        if mode == "500":
            status, body = 500, b'{"error": "model crashed"}'
        elif mode == "malformed":
            body = b'{"embeddings": [[0.1, 0.2'
        elif mode == "count":
            body = json.dumps({"embeddings": [[1.0, 0.0, 0.0]] * (len(texts) + 1)}).encode()
        elif mode == "no-key":
            body = json.dumps({"vectors": [[1.0, 0.0, 0.0]] * len(texts)}).encode()
        elif mode == "ragged":
            body = json.dumps({"embeddings": [[1.0, 0.0, 0.0]] + [[1.0, 0.0]] * (len(texts) - 1)}).encode()
        elif mode == "non-numeric":
            body = json.dumps({"embeddings": [["x", 0.0, 0.0]] * len(texts)}).encode()
        elif mode == "overflow":  # finite in JSON, infinite as float32
            body = json.dumps({"embeddings": [[1e300, 1.0, 0.0]] * len(texts)}).encode()
        elif mode == "dim-changes":
            self.server.calls += 1
            width = 3 if self.server.calls == 1 else 4
            body = json.dumps({"embeddings": [[3.0] + [4.0] + [0.0] * (width - 2)] * len(texts)}).encode()
        else:  # "ok": unnormalised rows to check client-side normalisation
            body = json.dumps({"embeddings": [[3.0, 4.0, 0.0]] * len(texts)}).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def fault_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FaultHandler)
    server.daemon_threads = True
    server.mode = "ok"
    server.calls = 0
    server.release = threading.Event()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}/embed"
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_http_normalises_rows(fault_server):
    _, url = fault_server
    emb = HttpEmbedder(url)
    out = emb.embed(["a", "b"])
    np.testing.assert_allclose(out, [[0.6, 0.8, 0.0]] * 2, atol=1e-6)
    assert emb.dim == 3


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("500", "HTTP 500"),
        ("malformed", "malformed JSON"),
        ("count", "returned 3 vectors for 2 texts"),
        ("no-key", "no 'embeddings' list"),
        ("ragged", "unequal length"),
        ("non-numeric", "non-numeric"),
        ("overflow", "non-finite"),
    ],
)
def test_http_bad_responses_raise(fault_server, mode, message):
    server, url = fault_server
    server.mode = mode
    with pytest.raises(EmbeddingError, match=message):
        HttpEmbedder(url).embed(["a", "b"])


def test_http_dimension_change_raises(fault_server):
    server, url = fault_server
    server.mode = "dim-changes"
    emb = HttpEmbedder(url)
    assert emb.embed(["a"]).shape == (1, 3)
    with pytest.raises(EmbeddingError, match="4-d vectors, expected 3-d"):
        emb.embed(["b"])


def test_http_timeout_raises(fault_server):
    server, url = fault_server
    server.mode = "slow"
    emb = HttpEmbedder(url, timeout=0.3)
    t = time.monotonic()
    with pytest.raises(EmbeddingError, match="timed out"):
        emb.embed(["a"])
    assert time.monotonic() - t < 5


def test_http_connection_refused():
    with socket.socket() as s:  # a port that was free a moment ago and has no listener now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emb = load_embedder(url=f"http://127.0.0.1:{port}/embed")
    with pytest.raises(EmbeddingError, match="unreachable"):
        emb.embed(["a"])
    with pytest.raises(EmbeddingError, match="unreachable"):
        _ = emb.dim  # the dimension probe fails the same way
