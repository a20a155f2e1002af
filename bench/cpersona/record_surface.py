#!/usr/bin/env python3
"""Record CPersona's MCP tool surface as fixtures for memstream's compatibility tests.

Drives a real CPersona server (PyPI ``cpersona``, 2.6.x) over MCP stdio with a
small hand-written newline-delimited JSON-RPC client, so what is recorded is
exactly what travels on the wire (``isError`` included) and no SDK-side
normalisation sits between the server and the fixture.

Writes two files:

* ``tools.json``      -- the ``tools/list`` result with descriptions and titles removed: names,
  types and required sets are what memstream must match, and CPersona's prose stays its own.
* ``responses.json``  -- a scripted scenario: every call as
  ``{step, run, label, tool, arguments, isError, response, raw_text?}``, where
  ``response`` is the parsed JSON text content (``null`` when the text is not
  JSON; ``raw_text`` then holds it).

Two runs are recorded into ``responses.json`` and told apart by ``run``:

* ``none``  -- ``CPERSONA_EMBEDDING_MODE=none`` (keyword/FTS only). The main
  scenario: every tool, success and failure shapes, dedup scoping probes,
  invalid arguments and an unknown tool.
* ``hash``  -- ``CPERSONA_EMBEDDING_MODE=http`` against a deterministic
  hash-based ``/embed`` server this script starts on 127.0.0.1 (no model, no
  network). Only the shapes that need vectors: cosine-signalled recall rows and
  a successful ``set_recall_precision``.

CPersona is never imported: it runs in its own virtualenv as a subprocess and
writes only to a temporary directory (``CPERSONA_DB_PATH``, ``HOME`` and the
working directory all point there). The update check and operating context are
switched off so the server makes no outbound connection.

Usage::

    python3 -m venv /work/cpersona-venv
    /work/cpersona-venv/bin/pip install cpersona==2.6.14
    python bench/cpersona/record_surface.py \
        --cpersona /work/cpersona-venv/bin/cpersona \
        --out tests/fixtures/cpersona

Values that depend on the wall clock (``created_at``, default ``timestamp``,
``declared_at``, ``db_size_bytes``) differ between recordings; everything else
(row ids, refs, error strings, key sets) is deterministic for a given version.
The temporary directory is replaced by ``<TMPDIR>`` and the embedding server's
URL by ``<EMBED_URL>`` in everything recorded.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = "2025-06-18"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "cpersona"
DEFAULT_CPERSONA = "/work/cpersona-venv/bin/cpersona"


# ---------------------------------------------------------------------------
# Minimal MCP stdio client (newline-delimited JSON-RPC 2.0)
# ---------------------------------------------------------------------------


class StdioMcpClient:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, stderr_path: str, timeout: float = 120.0):
        self._stderr = open(stderr_path, "w")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=cwd,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self._next_id = 0
        self.timeout = timeout
        self.notifications: list[dict] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _send(self, message: dict) -> None:
        assert self.proc.stdin is not None
        # ASCII escapes keep a lone surrogate sendable (it is a JSON escape on the wire).
        self.proc.stdin.write(json.dumps(message, ensure_ascii=True) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict | None = None, timeout: float | None = None) -> dict:
        """Send one request and wait for its reply; raise TimeoutError if none comes."""
        self._next_id += 1
        rid = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer to {method} (id {rid})")
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"server closed stdout while waiting for {method} (rc={self.proc.poll()})")
            line = line.strip()
            if not line:
                continue
            reply = json.loads(line)
            if reply.get("id") == rid and ("result" in reply or "error" in reply):
                return reply
            if "method" in reply and "id" not in reply:
                self.notifications.append(reply)
            # Anything else (server->client requests) is not expected here; ignore.

    def notify(self, method: str, params: dict | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        finally:
            self._stderr.close()


# ---------------------------------------------------------------------------
# Deterministic hash "embedding" server (127.0.0.1 only)
# ---------------------------------------------------------------------------

EMBED_DIM = 256
_TOKEN = re.compile(r"\w+", re.UNICODE)


def hash_embedding(text: str, dim: int = EMBED_DIM) -> list[float]:
    """Signed feature hashing of lower-cased word tokens, L2-normalised.

    Texts sharing words get positive cosine; unrelated texts sit near 0. A text
    with no word token falls back to hashing the whole string.
    """
    vec = [0.0] * dim
    tokens = _TOKEN.findall(text.lower()) or [text]
    for tok in tokens:
        digest = hashlib.sha256(tok.encode("utf-8")).digest()
        for k in range(2):
            idx = int.from_bytes(digest[4 * k : 4 * k + 4], "big") % dim
            sign = 1.0 if digest[8 + k] & 1 else -1.0
            vec[idx] += sign
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        vec[0] = 1.0
        norm = 1.0
    return [v / norm for v in vec]


class _EmbedHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep stderr quiet
        pass

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            payload = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._reply(400, {"error": "bad json"})
            return
        if self.path.split("?")[0].endswith("/embed"):
            texts = payload.get("texts") or []
            self._reply(200, {"embeddings": [hash_embedding(str(t)) for t in texts]})
        else:
            self._reply(404, {"error": "not found"})

    def do_GET(self):
        self._reply(404, {"error": "not found"})


class HashEmbedServer:
    def __init__(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EmbedHandler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/embed"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


# ---------------------------------------------------------------------------
# Recorder
# ---------------------------------------------------------------------------


class Recorder:
    def __init__(self, client: StdioMcpClient, run: str, calls: list[dict], scrub: dict[str, str]):
        self.client = client
        self.run = run
        self.calls = calls
        self.scrub = scrub

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, str):
            for needle, placeholder in self.scrub.items():
                if needle:
                    value = value.replace(needle, placeholder)
            return value
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        if isinstance(value, dict):
            return {self._scrub(k): self._scrub(v) for k, v in value.items()}
        return value

    def call(self, label: str, tool: str, arguments: Any, timeout: float | None = None) -> Any:
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        entry: dict[str, Any] = {
            "step": len(self.calls) + 1,
            "run": self.run,
            "label": label,
            "tool": tool,
            "arguments": self._scrub(arguments),
        }
        try:
            reply = self.client.request("tools/call", params, timeout=timeout)
        except TimeoutError:
            # The server answered nothing (e.g. the transport dropped an unparseable message).
            entry.update({"no_reply": True, "no_reply_timeout_seconds": timeout, "isError": None, "response": None})
            self.calls.append(entry)
            return None
        parsed: Any = None
        if "error" in reply:
            # A JSON-RPC level error (not a tool result).
            entry["jsonrpc_error"] = self._scrub(reply["error"])
            entry["isError"] = None
            entry["response"] = None
        else:
            result = reply["result"]
            entry["isError"] = result.get("isError")
            content = result.get("content") or []
            texts = [c.get("text", "") for c in content if c.get("type") == "text"]
            text = texts[0] if texts else ""
            try:
                parsed = json.loads(text)
                entry["response"] = self._scrub(parsed)
            except ValueError:
                entry["response"] = None
                entry["raw_text"] = self._scrub(text)
            if len(content) != 1 or content[0].get("type") != "text":
                entry["content_blocks"] = self._scrub(content)
            if "structuredContent" in result and result["structuredContent"] is not None:
                entry["structuredContent"] = self._scrub(result["structuredContent"])
        self.calls.append(entry)
        return parsed


def start_server(cpersona: str, tmp: str, embedding: str, embed_url: str = "") -> StdioMcpClient:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": tmp,
        "LANG": "C.UTF-8",
        "CPERSONA_DB_PATH": os.path.join(tmp, "data", "cpersona.db"),
        "CPERSONA_EMBEDDING_MODE": embedding,
        "CPERSONA_UPDATE_CHECK": "false",
        "CPERSONA_OPERATING_CONTEXT": "off",
        "CPERSONA_TRANSPORT": "stdio",
    }
    if embed_url:
        env["CPERSONA_EMBEDDING_URL"] = embed_url
    client = StdioMcpClient([cpersona], env=env, cwd=tmp, stderr_path=os.path.join(tmp, f"stderr-{embedding}.log"))
    return client


def handshake(client: StdioMcpClient) -> dict:
    reply = client.request(
        "initialize",
        {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "memstream-record-surface", "version": "1"},
        },
    )
    if "error" in reply:
        raise RuntimeError(f"initialize failed: {reply['error']}")
    client.notify("notifications/initialized")
    return reply["result"]


# ---------------------------------------------------------------------------
# Scenario: embedding mode none (the main surface)
# ---------------------------------------------------------------------------

T = "2026-01-15T10:00:00+00:00"  # fixed caller timestamps keep most rows stable


def ts(minute: int) -> str:
    return f"2026-01-15T10:{minute:02d}:00+00:00"


def scenario_none(rec: Recorder) -> None:
    A = "alice"

    # --- store: the four outcomes -------------------------------------------------
    s1 = rec.call(
        "store: stored (flat form, caller id, explicit timestamp)",
        "store",
        {
            "agent_id": A,
            "content": "The staging deploy key rotates every Tuesday.",
            "id": "msg-001",
            "timestamp": ts(0),
        },
    )
    rec.call(
        "store: stored (no id, no timestamp -> server default timestamp)",
        "store",
        {"agent_id": A, "content": "Alice prefers green tea over coffee."},
    )
    rec.call(
        "store: skipped by msg_id (same id, changed content: no upsert)",
        "store",
        {"agent_id": A, "content": "The staging deploy key rotates every Friday.", "id": "msg-001", "timestamp": ts(1)},
    )
    rec.call(
        "store: skipped by content (same text, no id)",
        "store",
        {"agent_id": A, "content": "Alice prefers green tea over coffee."},
    )
    rec.call(
        "store: skipped by content (same text after whitespace strip)",
        "store",
        {"agent_id": A, "content": "   Alice prefers green tea over coffee.  \n"},
    )
    rec.call("store: rejected, empty content", "store", {"agent_id": A, "content": ""})
    rec.call(
        "store: rejected, whitespace-only content (empty after sanitization)",
        "store",
        {"agent_id": A, "content": "   \n\t "},
    )
    rec.call(
        "store: rejected, content only a [Memory from ...] annotation",
        "store",
        {"agent_id": A, "content": "[Memory from 2026-01-01]"},
    )
    rec.call("store: rejected, content omitted", "store", {"agent_id": A})
    rec.call("store: rejected, agent_id omitted (no ACL)", "store", {"content": "orphan text"})
    rec.call("store: rejected, empty arguments", "store", {})
    rec.call(
        "store: id longer than 256 chars (schema maxLength, before the handler)",
        "store",
        {"agent_id": A, "content": "long id row", "id": "x" * 257},
    )
    rec.call(
        "store: channel longer than 256 chars (schema maxLength, before the handler)",
        "store",
        {"agent_id": A, "content": "long channel row", "channel": "c" * 257},
    )
    rec.call(
        "store: rejected, timestamp longer than 64 chars (schema maxLength)",
        "store",
        {"agent_id": A, "content": "long ts row", "timestamp": "2026-01-15T10:00:00+00:00" + "0" * 60},
    )
    rec.call(
        "store: rejected, metadata larger than 8000 chars serialised",
        "store",
        {"agent_id": A, "content": "big metadata row", "metadata": {"blob": "m" * 8000}},
    )
    rec.call(
        "store: rejected, flat and message forms mixed",
        "store",
        {"agent_id": A, "content": "mixed", "message": {"content": "mixed too"}},
    )
    rec.call(
        "store: stored via legacy message form (bare 'user' source folded)",
        "store",
        {
            "agent_id": A,
            "message": {
                "content": "Legacy form row about the quarterly report.",
                "id": "legacy-1",
                "source": "user",
                "timestamp": ts(2),
                "metadata": {"k": "v"},
            },
        },
    )
    rec.call(
        "store: stored with explicit source, metadata, channel and project",
        "store",
        {
            "agent_id": A,
            "content": "Project Phoenix launches in March.",
            "id": "msg-002",
            "source": {"type": "User", "id": "discord:42", "name": "Bob"},
            "timestamp": ts(3),
            "metadata": {"topic": "launch"},
            "channel": "general",
            "project_id": "phoenix",
        },
    )
    rec.call(
        "store: stored, unparseable timestamp is accepted verbatim",
        "store",
        {"agent_id": A, "content": "Row with an odd timestamp.", "timestamp": "yesterday-ish"},
    )
    rec.call(
        "store: stored, naive timestamp (no offset)",
        "store",
        {"agent_id": A, "content": "Row with a naive timestamp.", "timestamp": "2026-01-15 10:05:00"},
    )
    rec.call(
        "store: stored, timestamp far in the future (warn mode adds timestamp_ahead_of_clock)",
        "store",
        {"agent_id": A, "content": "Row stamped in the future.", "timestamp": "2099-01-01T00:00:00+00:00"},
    )
    rec.call(
        "store: stored with lock:true (lock rider)",
        "store",
        {
            "agent_id": A,
            "content": "Locked fact: the server room code is 4711.",
            "id": "msg-lock",
            "timestamp": ts(4),
            "lock": True,
        },
    )
    rec.call(
        "store: skipped duplicate with lock:true still locks the existing row",
        "store",
        {"agent_id": A, "content": "Alice prefers green tea over coffee.", "lock": True},
    )
    rec.call(
        "store: stored with associations rider",
        "store",
        {
            "agent_id": A,
            "content": "Bob owns the billing service.",
            "id": "msg-assoc",
            "timestamp": ts(5),
            "associations": {
                "entities": [{"name": "Bob", "aliases": ["Robert"]}, {"name": "billing service"}],
                "relations": [{"subject": "Bob", "predicate": "owns", "object": "billing service"}],
            },
        },
    )
    long_text = "Release checklist. " + " ".join(
        f"Step {i}: verify component {i} and record the result." for i in range(1, 20)
    )
    rec.call(
        "store: stored, long content (> 500 chars, preview tier on recall)",
        "store",
        {"agent_id": A, "content": long_text, "id": "msg-long", "timestamp": ts(6)},
    )
    rec.call(
        "store: stored, content over the 16000-char cap is truncated (truncated:true)",
        "store",
        {"agent_id": "cap-agent", "content": "word " * 3300, "timestamp": ts(7)},
    )
    rec.call(
        "store: stored, empty-string agent_id is a valid (empty) agent bucket",
        "store",
        {"agent_id": "", "content": "Row owned by the empty agent id.", "timestamp": ts(8)},
    )
    rec.call(
        "store: project_id '@auto' with no operating context is stored literally",
        "store",
        {"agent_id": A, "content": "Row stored under the @auto sentinel.", "project_id": "@auto", "timestamp": ts(9)},
    )
    rec.call(
        "store: extra unknown argument is ignored (no additionalProperties:false)",
        "store",
        {"agent_id": A, "content": "Row stored with an unknown extra argument.", "bogus_arg": 1, "timestamp": ts(9)},
    )

    # --- dedup scoping probes -----------------------------------------------------
    D = "dedup-agent"
    g = rec.call(
        "dedup msg_id: global '' store with id g1",
        "store",
        {"agent_id": D, "content": "alpha in global", "id": "g1", "timestamp": ts(10)},
    )
    rec.call(
        "dedup msg_id: project P store with id g1 -> skipped (P sees the global pool)",
        "store",
        {"agent_id": D, "content": "alpha in P", "id": "g1", "project_id": "P", "timestamp": ts(11)},
    )
    rec.call(
        "dedup msg_id: project P store with id p1 -> stored",
        "store",
        {"agent_id": D, "content": "beta in P", "id": "p1", "project_id": "P", "timestamp": ts(12)},
    )
    rec.call(
        "dedup msg_id: global store with id p1 -> stored (global does not see P)",
        "store",
        {"agent_id": D, "content": "beta in global", "id": "p1", "timestamp": ts(13)},
    )
    rec.call(
        "dedup msg_id: project Q store with id p1 -> skipped (global copy now exists and Q sees global)",
        "store",
        {"agent_id": D, "content": "beta in Q", "id": "p1", "project_id": "Q", "timestamp": ts(14)},
    )
    rec.call(
        "dedup msg_id: project Q store with id q1 -> stored",
        "store",
        {"agent_id": D, "content": "gamma in Q", "id": "q1", "project_id": "Q", "timestamp": ts(15)},
    )
    rec.call(
        "dedup msg_id: project R store with id q1 -> stored (sibling project does not see Q)",
        "store",
        {"agent_id": D, "content": "gamma in R", "id": "q1", "project_id": "R", "timestamp": ts(16)},
    )
    rec.call(
        "dedup msg_id: project Q, channel c2, id q1 -> skipped (msg_id probe ignores channel)",
        "store",
        {
            "agent_id": D,
            "content": "gamma in Q c2",
            "id": "q1",
            "project_id": "Q",
            "channel": "c2",
            "timestamp": ts(17),
        },
    )
    rec.call(
        "dedup msg_id: another agent, id g1 -> stored (agent scoped)",
        "store",
        {"agent_id": "dedup-other", "content": "alpha for another agent", "id": "g1", "timestamp": ts(18)},
    )
    rec.call(
        "dedup content: global '' store 'shared text'",
        "store",
        {"agent_id": D, "content": "shared text", "timestamp": ts(19)},
    )
    rec.call(
        "dedup content: project P store 'shared text' -> skipped (P sees the global pool)",
        "store",
        {"agent_id": D, "content": "shared text", "project_id": "P", "timestamp": ts(20)},
    )
    rec.call(
        "dedup content: project P store 'p-only text' -> stored",
        "store",
        {"agent_id": D, "content": "p-only text", "project_id": "P", "timestamp": ts(21)},
    )
    rec.call(
        "dedup content: global store 'p-only text' -> stored (global does not see P)",
        "store",
        {"agent_id": D, "content": "p-only text", "timestamp": ts(22)},
    )
    rec.call(
        "dedup content: channel c1 store 'chan text' -> stored",
        "store",
        {"agent_id": D, "content": "chan text", "channel": "c1", "timestamp": ts(23)},
    )
    rec.call(
        "dedup content: channel c2 store 'chan text' -> stored (sibling channel)",
        "store",
        {"agent_id": D, "content": "chan text", "channel": "c2", "timestamp": ts(24)},
    )
    rec.call(
        "dedup content: channel c1 store 'shared text' -> skipped (c1 sees channel '')",
        "store",
        {"agent_id": D, "content": "shared text", "channel": "c1", "timestamp": ts(25)},
    )
    rec.call(
        "dedup content: source id u1 stores 'sourced text'",
        "store",
        {
            "agent_id": D,
            "content": "sourced text",
            "source": {"type": "User", "id": "u1", "name": "U1"},
            "timestamp": ts(26),
        },
    )
    rec.call(
        "dedup content: same bucket, source id u2 -> rejected (one copy per exact bucket)",
        "store",
        {
            "agent_id": D,
            "content": "sourced text",
            "source": {"type": "User", "id": "u2", "name": "U2"},
            "timestamp": ts(27),
        },
    )
    rec.call(
        "dedup content: same text, source id u1 again -> skipped",
        "store",
        {
            "agent_id": D,
            "content": "sourced text",
            "source": {"type": "User", "id": "u1", "name": "other name"},
            "timestamp": ts(28),
        },
    )
    rec.call(
        "dedup content: project P, source u9, text held in global by another source -> stored",
        "store",
        {
            "agent_id": D,
            "content": "shared text",
            "project_id": "P",
            "source": {"type": "User", "id": "u9", "name": "U9"},
            "timestamp": ts(29),
        },
    )
    rec.call(
        "dedup content: new msg_id but duplicate text -> skipped as duplicate content",
        "store",
        {"agent_id": D, "content": "shared text", "id": "fresh-id", "timestamp": ts(30)},
    )
    d1 = rec.call(
        "dedup deleted rows: store id d1",
        "store",
        {"agent_id": D, "content": "to be deleted", "id": "d1", "timestamp": ts(31)},
    )
    rec.call("dedup deleted rows: delete it", "delete_memory", {"agent_id": D, "memory_id": d1["id"]})
    rec.call(
        "dedup deleted rows: same id and text again -> stored (hard delete, no tombstone)",
        "store",
        {"agent_id": D, "content": "to be deleted", "id": "d1", "timestamp": ts(32)},
    )
    rec.call("dedup: list the dedup agent's rows (no project filter)", "list_memories", {"agent_id": D, "limit": 50})
    _ = g

    # --- recall -------------------------------------------------------------------
    rec.call("recall: keyword match", "recall", {"agent_id": A, "query": "staging deploy key"})
    rec.call(
        "recall: second recall in the same session (advisory shortens)", "recall", {"agent_id": A, "query": "green tea"}
    )
    rec.call(
        "recall: project_id filter 'phoenix' (bucket plus global pool)",
        "recall",
        {"agent_id": A, "query": "Phoenix launches March", "project_id": "phoenix"},
    )
    rec.call(
        "recall: project_id '' (global pool only) misses the phoenix row",
        "recall",
        {"agent_id": A, "query": "Phoenix launches March", "project_id": ""},
    )
    rec.call("recall: channel filter 'general'", "recall", {"agent_id": A, "query": "Phoenix", "channel": "general"})
    rec.call("recall: source_id filter", "recall", {"agent_id": A, "query": "Phoenix", "source_id": "discord:42"})
    rec.call(
        "recall: long row comes back as a preview with excerpt",
        "recall",
        {"agent_id": A, "query": "release checklist verify component"},
    )
    rec.call(
        "recall: full_content=true",
        "recall",
        {"agent_id": A, "query": "release checklist verify component", "full_content": True},
    )
    rec.call("recall: empty query (recent rows)", "recall", {"agent_id": A, "query": "", "limit": 3})
    rec.call("recall: nothing matches", "recall", {"agent_id": A, "query": "zebra quantum xylophone"})
    rec.call(
        "recall: exclude_contents",
        "recall",
        {"agent_id": A, "query": "green tea", "exclude_contents": ["alice prefers green tea over coffee."]},
    )
    rec.call("recall: unknown agent", "recall", {"agent_id": "nobody", "query": "anything"})
    rec.call(
        "recall: several rows (ascending order, last is best)", "recall", {"agent_id": D, "query": "text", "limit": 5}
    )
    rec.call(
        "recall: dedup agent, project P (sees P and global)",
        "recall",
        {"agent_id": D, "query": "shared text", "project_id": "P"},
    )
    rec.call(
        "recall: time_cue that cannot be read",
        "recall",
        {"agent_id": A, "query": "deploy", "time_cue": {"after": "not-a-date", "confidence": "sure"}},
    )

    # --- recall_with_context --------------------------------------------------------
    rec.call(
        "recall_with_context: merge with mixed-offset and undated context",
        "recall_with_context",
        {
            "agent_id": A,
            "query": "staging deploy key",
            "external_context": [
                {
                    "role": "user",
                    "content": "When does the deploy key rotate?",
                    "name": "Carol",
                    "user_id": "777",
                    "timestamp": "2026-01-15T19:30:00+09:00",
                },
                {"role": "assistant", "content": "Let me check my notes.", "timestamp": "2026-01-15T10:31:00Z"},
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "undated message"},
            ],
        },
    )
    rec.call(
        "recall_with_context: non-string field reported in context_field_issues",
        "recall_with_context",
        {
            "agent_id": A,
            "query": "green tea",
            "external_context": [{"role": "user", "content": "hi", "timestamp": 12345}],
        },
    )
    rec.call("recall_with_context: no context", "recall_with_context", {"agent_id": A, "query": "green tea"})

    # --- get_contents ---------------------------------------------------------------
    mem1 = s1["id"]
    rec.call(
        "get_contents: mixed refs (found, missing, malformed)",
        "get_contents",
        {"agent_id": A, "refs": [f"mem:{mem1}", "mem:999999", "bogus", "mem:abc", "ep:999"]},
    )
    rec.call(
        "get_contents: range object (span)",
        "get_contents",
        {"agent_id": A, "refs": [{"ref": f"mem:{mem1}", "span": [4, 18]}]},
    )
    rec.call(
        "get_contents: node range on a short row -> unresolved",
        "get_contents",
        {"agent_id": A, "refs": [{"ref": f"mem:{mem1}", "node": [0, 1]}]},
    )
    rec.call(
        "get_contents: another agent's ref lands in missing",
        "get_contents",
        {"agent_id": "mallory", "refs": [f"mem:{mem1}"]},
    )
    rec.call("get_contents: empty refs -> error", "get_contents", {"agent_id": A, "refs": []})
    rec.call("get_contents: empty agent_id -> error", "get_contents", {"agent_id": "", "refs": [f"mem:{mem1}"]})
    rec.call(
        "get_contents: 21 refs -> schema maxItems",
        "get_contents",
        {"agent_id": A, "refs": [f"mem:{i}" for i in range(1, 22)]},
    )

    # --- update / lock / unlock / delete -------------------------------------------
    u = rec.call(
        "store: row for update/delete tests",
        "store",
        {"agent_id": A, "content": "Temporary note about printers.", "id": "msg-upd", "timestamp": ts(40)},
    )
    uid = u["id"]
    rec.call(
        "update_memory: ok",
        "update_memory",
        {"agent_id": A, "memory_id": uid, "content": "Updated note about the 3rd floor printer."},
    )
    rec.call(
        "update_memory: content over the cap -> ok with truncated:true",
        "update_memory",
        {"agent_id": A, "memory_id": uid, "content": "p" * 16010},
    )
    rec.call(
        "update_memory: back to short text",
        "update_memory",
        {"agent_id": A, "memory_id": uid, "content": "Updated note about the 3rd floor printer."},
    )
    rec.call(
        "update_memory: not found (agent_id given -> ambiguous message)",
        "update_memory",
        {"agent_id": A, "memory_id": 999999, "content": "x"},
    )
    rec.call(
        "update_memory: not found (no agent_id -> specific message)",
        "update_memory",
        {"memory_id": 999999, "content": "x"},
    )
    rec.call(
        "update_memory: another agent's row (agent_id given)",
        "update_memory",
        {"agent_id": "mallory", "memory_id": uid, "content": "hijack"},
    )
    rec.call("update_memory: empty content", "update_memory", {"agent_id": A, "memory_id": uid, "content": "  "})
    rec.call(
        "update_memory: annotation-only content",
        "update_memory",
        {"agent_id": A, "memory_id": uid, "content": "[Memory from x]"},
    )
    rec.call(
        "update_memory: text another row in the bucket holds -> refused",
        "update_memory",
        {"agent_id": A, "memory_id": uid, "content": "Alice prefers green tea over coffee."},
    )
    rec.call("lock_memory: ok", "lock_memory", {"agent_id": A, "memory_id": uid})
    rec.call("lock_memory: again (idempotent)", "lock_memory", {"agent_id": A, "memory_id": uid})
    rec.call(
        "update_memory: locked (agent_id given -> ambiguous message)",
        "update_memory",
        {"agent_id": A, "memory_id": uid, "content": "edit while locked"},
    )
    rec.call(
        "update_memory: locked (no agent_id -> specific message)",
        "update_memory",
        {"memory_id": uid, "content": "edit while locked"},
    )
    rec.call(
        "delete_memory: locked (agent_id given -> ambiguous message)",
        "delete_memory",
        {"agent_id": A, "memory_id": uid},
    )
    rec.call("delete_memory: locked (no agent_id -> specific message)", "delete_memory", {"memory_id": uid})
    rec.call("lock_memory: not found (agent_id given)", "lock_memory", {"agent_id": A, "memory_id": 999999})
    rec.call("lock_memory: not found (no agent_id)", "lock_memory", {"memory_id": 999999})
    rec.call("unlock_memory: ok", "unlock_memory", {"agent_id": A, "memory_id": uid})
    rec.call("unlock_memory: not found", "unlock_memory", {"agent_id": A, "memory_id": 999999})
    rec.call("delete_memory: ok", "delete_memory", {"agent_id": A, "memory_id": uid})
    rec.call(
        "delete_memory: not found after delete (agent_id given)", "delete_memory", {"agent_id": A, "memory_id": uid}
    )
    rec.call("delete_memory: not found (no agent_id)", "delete_memory", {"memory_id": uid})
    rec.call("delete_memory: huge id beyond SQLite INTEGER", "delete_memory", {"agent_id": A, "memory_id": 2**70})

    # --- episodes -------------------------------------------------------------------
    e1 = rec.call(
        "archive_episode: ok",
        "archive_episode",
        {
            "agent_id": A,
            "summary": "Discussed the staging deploy key rotation schedule.",
            "keywords": "deploy key rotation staging",
            "resolved": True,
            "history": [
                {"role": "user", "content": "when?", "timestamp": "2026-01-15T10:00:00+00:00"},
                {"role": "assistant", "content": "Tuesdays", "timestamp": "2026-01-15T10:02:00+00:00"},
            ],
        },
    )
    rec.call(
        "archive_episode: ok, project and channel, no history",
        "archive_episode",
        {"agent_id": A, "summary": "Phoenix launch planning call.", "project_id": "phoenix", "channel": "general"},
    )
    rec.call("archive_episode: empty summary -> error", "archive_episode", {"agent_id": A, "summary": ""})
    rec.call("archive_episode: whitespace summary -> error", "archive_episode", {"agent_id": A, "summary": "   "})
    rec.call("archive_episode: summary missing -> schema", "archive_episode", {"agent_id": A})
    rec.call("get_contents: episode ref", "get_contents", {"agent_id": A, "refs": [f"ep:{e1['episode_id']}"]})
    rec.call("list_episodes: agent", "list_episodes", {"agent_id": A})
    rec.call("list_episodes: project filter ''", "list_episodes", {"agent_id": A, "project_id": ""})
    e3 = rec.call("archive_episode: one to delete", "archive_episode", {"agent_id": A, "summary": "Throwaway episode."})
    rec.call(
        "delete_episode: another agent (agent_id given)",
        "delete_episode",
        {"agent_id": "mallory", "episode_id": e3["episode_id"]},
    )
    rec.call("delete_episode: ok", "delete_episode", {"agent_id": A, "episode_id": e3["episode_id"]})
    rec.call("delete_episode: not found", "delete_episode", {"agent_id": A, "episode_id": e3["episode_id"]})

    # --- profile --------------------------------------------------------------------
    rec.call("get_profile: none yet", "get_profile", {"agent_id": A})
    rec.call("update_profile: ok", "update_profile", {"agent_id": A, "profile": "Alice: SRE, likes tea."})
    rec.call(
        "update_profile: replaces", "update_profile", {"agent_id": A, "profile": "Alice: SRE lead, likes green tea."}
    )
    rec.call("get_profile: after update", "get_profile", {"agent_id": A})
    rec.call("update_profile: empty -> ok:false", "update_profile", {"agent_id": A, "profile": ""})
    rec.call("update_profile: whitespace -> ok:false", "update_profile", {"agent_id": A, "profile": "   "})
    rec.call(
        "update_profile: over 2000 chars -> truncated",
        "update_profile",
        {"agent_id": "cap-agent", "profile": "q" * 2100},
    )
    rec.call("get_profile: unknown agent", "get_profile", {"agent_id": "nobody"})

    # --- listings -------------------------------------------------------------------
    rec.call("list_memories: agent, limit 5", "list_memories", {"agent_id": A, "limit": 5})
    rec.call(
        "list_memories: agent, project 'phoenix' (bucket plus global)",
        "list_memories",
        {"agent_id": A, "project_id": "phoenix", "limit": 3},
    )
    rec.call("list_memories: all agents (agent_id ''), limit 2", "list_memories", {"agent_id": "", "limit": 2})
    rec.call("list_memories: agent_id omitted (all agents), limit 1", "list_memories", {"limit": 1})
    rec.call("list_memories: unknown agent", "list_memories", {"agent_id": "nobody"})

    # --- associations / traverse / reconstruct --------------------------------------
    rec.call(
        "declare_associations: anchored declaration",
        "declare_associations",
        {
            "agent_id": A,
            "anchor_ref": f"mem:{mem1}",
            "associations": {
                "entities": [{"name": "deploy key", "aliases": ["staging key"]}, {"name": "staging"}],
                "relations": [{"subject": "deploy key", "predicate": "belongs to", "object": "staging"}],
            },
        },
    )
    decl = rec.call(
        "declare_associations: malformed items are dropped",
        "declare_associations",
        {
            "agent_id": A,
            "associations": {
                "entities": [{"name": ""}, {"name": "Carol", "aliases": ["C"]}],
                "relations": [
                    {"subject": "Carol", "predicate": "", "object": "Bob"},
                    {"subject": "mem:999999", "predicate": "supports", "object": f"mem:{mem1}"},
                ],
            },
        },
    )
    rec.call(
        "declare_associations: bad anchor_ref",
        "declare_associations",
        {"agent_id": A, "anchor_ref": "mem:999999", "associations": {"entities": [{"name": "Dave"}]}},
    )
    rec.call("declare_associations: nothing declared", "declare_associations", {"agent_id": A})
    rec.call("traverse: by alias", "traverse", {"agent_id": A, "entity": "staging key"})
    rec.call("traverse: max_hops 0", "traverse", {"agent_id": A, "entity": "Bob", "max_hops": 0})
    rec.call("traverse: unknown entity", "traverse", {"agent_id": A, "entity": "Nobody At All"})
    rel = rec.call(
        "declare_associations: declare a relation to retract",
        "declare_associations",
        {
            "agent_id": A,
            "associations": {"relations": [{"subject": "Carol", "predicate": "reports to", "object": "Bob"}]},
        },
    )
    rec.call(
        "declare_associations: retract relation and a mention",
        "declare_associations",
        {
            "agent_id": A,
            "retract": {"relations": rel.get("relations", []), "mentions": [{"entity": 1, "ref": "mem:999999"}]},
        },
    )
    _ = decl
    rec.call("reconstruct: default", "reconstruct", {"agent_id": A, "query": "staging deploy key"})
    rec.call(
        "reconstruct: count 1, mode lite",
        "reconstruct",
        {"agent_id": A, "query": "green tea", "count": 1, "mode": "lite"},
    )
    rec.call("reconstruct: nothing matches", "reconstruct", {"agent_id": A, "query": "zebra quantum xylophone"})
    rec.call(
        "reconstruct: mode and lite together",
        "reconstruct",
        {"agent_id": A, "query": "tea", "mode": "pro", "lite": True},
    )

    # --- precision ------------------------------------------------------------------
    rec.call("get_recall_precision: default", "get_recall_precision", {"agent_id": A})
    rec.call("get_recall_precision: empty agent_id", "get_recall_precision", {"agent_id": ""})
    rec.call("set_recall_precision: unknown level", "set_recall_precision", {"agent_id": A, "precision": "high"})
    rec.call(
        "set_recall_precision: strict without embeddings -> calibration fails",
        "set_recall_precision",
        {"agent_id": A, "precision": "strict"},
    )
    rec.call("set_recall_precision: empty agent_id", "set_recall_precision", {"agent_id": "", "precision": "strict"})

    # --- health ---------------------------------------------------------------------
    rec.call("check_health: one agent", "check_health", {"agent_id": A})
    rec.call("check_health: unknown check name", "check_health", {"agent_id": A, "checks": ["no_such_check"]})
    rec.call("check_health: subset", "check_health", {"checks": ["duplicate_content", "empty_content"]})

    # --- export / import / merge ----------------------------------------------------
    rec.call("export_memories: one agent", "export_memories", {"agent_id": A, "output_path": "exports/alice.jsonl"})
    rec.call("export_memories: '..' path refused", "export_memories", {"agent_id": A, "output_path": "../escape.jsonl"})
    rec.call(
        "import_memories: dry run into a new agent",
        "import_memories",
        {"input_path": "exports/alice.jsonl", "target_agent_id": "alice-restored", "dry_run": True},
    )
    rec.call(
        "import_memories: into a new agent",
        "import_memories",
        {"input_path": "exports/alice.jsonl", "target_agent_id": "alice-restored"},
    )
    rec.call(
        "import_memories: again (idempotent, all skipped)",
        "import_memories",
        {"input_path": "exports/alice.jsonl", "target_agent_id": "alice-restored"},
    )
    rec.call("import_memories: missing file", "import_memories", {"input_path": "exports/none.jsonl"})
    rec.call(
        "merge_memories: dry run",
        "merge_memories",
        {"source_agent_id": A, "target_agent_id": "alice-copy", "dry_run": True},
    )
    rec.call("merge_memories: copy", "merge_memories", {"source_agent_id": A, "target_agent_id": "alice-copy"})
    rec.call(
        "merge_memories: copy again (skip strategy)",
        "merge_memories",
        {"source_agent_id": A, "target_agent_id": "alice-copy"},
    )
    rec.call(
        "merge_memories: bad strategy",
        "merge_memories",
        {"source_agent_id": A, "target_agent_id": "alice-copy", "strategy": "overwrite"},
    )
    rec.call(
        "merge_memories: bad mode",
        "merge_memories",
        {"source_agent_id": A, "target_agent_id": "alice-copy", "mode": "teleport"},
    )
    rec.call("merge_memories: same source and target", "merge_memories", {"source_agent_id": A, "target_agent_id": A})
    rec.call(
        "merge_memories: move",
        "merge_memories",
        {"source_agent_id": "alice-restored", "target_agent_id": "alice-moved", "mode": "move"},
    )

    # --- delete_agent_data (locked rows included) ----------------------------------
    rec.call(
        "list_memories: alice-copy before delete_agent_data (has locked rows)",
        "list_memories",
        {"agent_id": "alice-copy", "limit": 3},
    )
    rec.call("delete_agent_data: removes locked rows too", "delete_agent_data", {"agent_id": "alice-copy"})
    rec.call("list_memories: alice-copy after delete_agent_data", "list_memories", {"agent_id": "alice-copy"})
    rec.call("delete_agent_data: unknown agent (zero counts)", "delete_agent_data", {"agent_id": "nobody"})
    rec.call("delete_agent_data: empty agent_id -> error", "delete_agent_data", {"agent_id": ""})

    # --- invalid arguments and unknown tool -----------------------------------------
    rec.call("invalid: store agent_id wrong type", "store", {"agent_id": 5, "content": "x"})
    rec.call("invalid: store content wrong type", "store", {"agent_id": A, "content": 123})
    rec.call("invalid: store source as string at top level", "store", {"agent_id": A, "content": "x", "source": "user"})
    rec.call("invalid: recall missing query", "recall", {"agent_id": A})
    rec.call("invalid: recall missing agent_id", "recall", {"query": "x"})
    rec.call("invalid: recall limit above maximum", "recall", {"agent_id": A, "query": "x", "limit": 101})
    rec.call("invalid: recall limit below minimum", "recall", {"agent_id": A, "query": "x", "limit": -1})
    rec.call("invalid: recall limit as string", "recall", {"agent_id": A, "query": "x", "limit": "5"})
    rec.call("invalid: delete_memory missing memory_id", "delete_memory", {"agent_id": A})
    rec.call("invalid: delete_memory memory_id as string", "delete_memory", {"agent_id": A, "memory_id": "12"})
    rec.call("invalid: delete_memory memory_id as boolean", "delete_memory", {"agent_id": A, "memory_id": True})
    rec.call(
        "edge: delete_memory memory_id as 1.0 (JSON Schema integer)",
        "delete_memory",
        {"agent_id": "nobody", "memory_id": 1.0},
    )
    rec.call("invalid: update_memory missing content", "update_memory", {"agent_id": A, "memory_id": 1})
    rec.call("invalid: get_contents refs not an array", "get_contents", {"agent_id": A, "refs": "mem:1"})
    rec.call("invalid: list_memories limit as string", "list_memories", {"agent_id": A, "limit": "10"})
    rec.call(
        "invalid: archive_episode resolved as string",
        "archive_episode",
        {"agent_id": A, "summary": "s", "resolved": "yes"},
    )
    rec.call("invalid: traverse max_hops above maximum", "traverse", {"agent_id": A, "entity": "Bob", "max_hops": 99})
    rec.call("invalid: reconstruct mode not in enum", "reconstruct", {"agent_id": A, "query": "x", "mode": "max"})
    rec.call("invalid: merge_memories missing target", "merge_memories", {"source_agent_id": A})
    rec.call("invalid: export_memories missing output_path", "export_memories", {"agent_id": A})
    rec.call("invalid: import_memories missing input_path", "import_memories", {})
    rec.call("invalid: get_profile missing agent_id", "get_profile", {})
    rec.call("invalid: set_recall_precision beta as string", "set_recall_precision", {"agent_id": A, "beta": "high"})
    rec.call(
        "invalid: lone surrogate in a string argument (SDK transport drops the message: no reply)",
        "store",
        {"agent_id": A, "content": "half a pair: \udfff"},
        timeout=10,
    )
    rec.call("unknown tool", "no_such_tool", {"agent_id": A})
    rec.call("unknown tool with no arguments", "forget_everything", {})


# ---------------------------------------------------------------------------
# Scenario: hash embeddings (shapes that need vectors)
# ---------------------------------------------------------------------------

FACTS = [
    "The staging deploy key rotates every Tuesday at noon.",
    "Alice prefers green tea over coffee in the morning.",
    "The billing service is owned by Bob and runs on Postgres.",
    "Project Phoenix launches in March after the security review.",
    "The office printer on the third floor jams on glossy paper.",
    "Carol is the on-call engineer for the payments team this week.",
    "Our Kubernetes cluster autoscaler caps at forty nodes.",
    "The quarterly report is due on the fifth business day.",
    "Dave moved the backups from tape to object storage last year.",
    "The API rate limit for partners is one hundred requests per second.",
    "Eve maintains the internal wiki and its search index.",
    "The VPN certificate expires at the end of June.",
    "Lunch orders go through the shared spreadsheet by eleven.",
    "The incident review meeting happens every Thursday afternoon.",
]


def scenario_hash(rec: Recorder) -> None:
    E = "emb-agent"
    for i, fact in enumerate(FACTS):
        rec.call(
            f"hash: store fact {i}", "store", {"agent_id": E, "content": fact, "id": f"fact-{i}", "timestamp": ts(i)}
        )
    rec.call(
        "hash: recall (vector + lexical, rrf)",
        "recall",
        {"agent_id": E, "query": "staging deploy key rotates every Tuesday"},
    )
    rec.call(
        "hash: recall, weak overlap (gate may drop everything)", "recall", {"agent_id": E, "query": "tea preference"}
    )
    rec.call(
        "hash: recall, several rows",
        "recall",
        {"agent_id": E, "query": "Bob owns the billing service; Carol is on-call for payments"},
    )
    rec.call("hash: get_recall_precision before", "get_recall_precision", {"agent_id": E})
    rec.call("hash: set_recall_precision strict", "set_recall_precision", {"agent_id": E, "precision": "strict"})
    rec.call("hash: get_recall_precision after strict", "get_recall_precision", {"agent_id": E})
    rec.call("hash: set_recall_precision raw beta", "set_recall_precision", {"agent_id": E, "beta": 3.0})
    rec.call("hash: set_recall_precision clear", "set_recall_precision", {"agent_id": E})
    rec.call("hash: get_recall_precision after clear", "get_recall_precision", {"agent_id": E})
    rec.call(
        "hash: recall_with_context",
        "recall_with_context",
        {
            "agent_id": E,
            "query": "billing service owned by Bob",
            "external_context": [{"role": "user", "content": "Who owns billing?", "timestamp": ts(30)}],
        },
    )
    rec.call("hash: reconstruct", "reconstruct", {"agent_id": E, "query": "billing service owned by Bob on Postgres"})
    rec.call(
        "hash: recall with trace",
        "recall",
        {"agent_id": E, "query": "staging deploy key rotates every Tuesday", "limit": 3, "trace": True},
    )
    rec.call("hash: check_health one agent", "check_health", {"agent_id": E})


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def dump_json(value: Any) -> str:
    """Readable UTF-8 JSON; a lone surrogate (unencodable) is written as its escape."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


def pip_version(cpersona: str, dist: str) -> str | None:
    python = os.path.join(os.path.dirname(cpersona), "python")
    try:
        out = subprocess.run(
            [python, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return out.stdout.strip()
    except Exception:
        return None


def run_once(cpersona: str, embedding: str, calls: list[dict], run_name: str, scenario) -> tuple[dict, dict]:
    tmp = tempfile.mkdtemp(prefix=f"cpersona-record-{run_name}-")
    try:
        if embedding == "hash":
            with HashEmbedServer() as embed:
                client = start_server(cpersona, tmp, "http", embed.url)
                try:
                    init = handshake(client)
                    tools = client.request("tools/list")["result"]
                    rec = Recorder(client, run_name, calls, {tmp: "<TMPDIR>", embed.url: "<EMBED_URL>"})
                    scenario(rec)
                finally:
                    client.close()
        else:
            client = start_server(cpersona, tmp, "none")
            try:
                init = handshake(client)
                tools = client.request("tools/list")["result"]
                rec = Recorder(client, run_name, calls, {tmp: "<TMPDIR>"})
                scenario(rec)
            finally:
                client.close()
        return init, tools
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def schema_only(value: Any, under_properties: bool = False) -> Any:
    """The tools/list result without its prose (descriptions, titles)."""
    if isinstance(value, dict):
        return {
            k: schema_only(v, k == "properties")
            for k, v in value.items()
            if under_properties or k not in ("description", "title")
        }
    if isinstance(value, list):
        return [schema_only(v) for v in value]
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpersona", default=DEFAULT_CPERSONA, help="path to the cpersona console script")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="directory for tools.json / responses.json")
    parser.add_argument("--skip-hash", action="store_true", help="record only the embedding-mode 'none' run")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    calls: list[dict] = []

    init, tools = run_once(args.cpersona, "none", calls, "none", scenario_none)
    if not args.skip_hash:
        _, tools_hash = run_once(args.cpersona, "hash", calls, "hash", scenario_hash)
        if tools_hash != tools:
            print("warning: tools/list differs between embedding modes", file=sys.stderr)

    (out / "tools.json").write_text(dump_json(schema_only(tools)), encoding="utf-8")

    meta = {
        "source": "cpersona (PyPI) driven over MCP stdio by bench/cpersona/record_surface.py",
        "cpersona_version": pip_version(args.cpersona, "cpersona"),
        "mcp_sdk_version_in_server_env": pip_version(args.cpersona, "mcp"),
        "protocol_version_requested": PROTOCOL_VERSION,
        "initialize": {
            "protocolVersion": init.get("protocolVersion"),
            "serverInfo": init.get("serverInfo"),
            "capabilities": init.get("capabilities"),
            "instructions_chars": len(init.get("instructions") or ""),
        },
        "runs": {
            "none": "CPERSONA_EMBEDDING_MODE=none",
            "hash": (
                f"CPERSONA_EMBEDDING_MODE=http against a local deterministic hash /embed ({EMBED_DIM}-dim, 127.0.0.1)"
            ),
        },
        "env": {
            "CPERSONA_UPDATE_CHECK": "false",
            "CPERSONA_OPERATING_CONTEXT": "off",
            "CPERSONA_DB_PATH": "<TMPDIR>/data/cpersona.db",
        },
        "record_shape": "{step, run, label, tool, arguments, isError, response, raw_text?}; response is the "
        "parsed JSON of the single text content block, null when it is not JSON",
        "volatile_fields": [
            "created_at",
            "timestamp (when defaulted)",
            "declared_at",
            "db_size_bytes",
            "fused_gate / calibrate thresholds (hash run)",
        ],
        "tool_count": len(tools.get("tools", [])),
        "tools_called": sorted({c["tool"] for c in calls}),
    }
    (out / "responses.json").write_text(dump_json({"meta": meta, "calls": calls}), encoding="utf-8")
    print(f"wrote {out / 'tools.json'} ({meta['tool_count']} tools) and {out / 'responses.json'} ({len(calls)} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
