"""How soon an MCP client learns of a store it subscribed to: from the store's answer (its ack)
to the ``notifications/resources/updated`` the watcher receives, over a real ``memstream serve``
on loopback (embedded, no embedder), for each way to subscribe: ``resources/subscribe`` on a
stateful HTTP session (its GET stream) and ``subscriptions/listen`` (2026-07-28, an SSE response).

The writer stores one memory at a time through MCP and waits for the notification before the
next, so each latency is one store's; a notification that beats the store's answer counts as 0.

    python bench/mcp_notify.py                      # 300 stores per way
    python bench/mcp_notify.py --stores 50 --out -  # quick, print only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memstream.api.faces.http import create_app
from memstream.api.faces.mcp_resources import memories_uri
from memstream.api.services.settings import load_settings

AGENT = "bench-notify"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "n": len(ms),
        "announced_before_ack": sum(m == 0.0 for m in ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p90_ms": round(ms[int(len(ms) * 0.9)], 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
        "max_ms": round(ms[-1], 2),
    }


async def _store(client: Client, i: int) -> float:
    result = await client.call_tool("store", {"agent_id": AGENT, "content": f"bench note {i} {time.time_ns()}"})
    block = result.content[0]
    assert isinstance(block, types.TextContent) and json.loads(block.text).get("result") == "stored", result
    return time.perf_counter()


async def _writer(url: str) -> Any:
    http = httpx2.AsyncClient(headers={"X-Client-Id": "bench-writer"}, timeout=httpx2.Timeout(60.0))
    return http, Client(streamable_http_client(url, http_client=http), mode="auto")


async def session_way(url: str, stores: int) -> list[float]:
    arrived: asyncio.Queue[float] = asyncio.Queue()

    async def handler(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            arrived.put_nowait(time.perf_counter())

    http, writer = await _writer(url)
    async with (
        http,
        writer,
        httpx2.AsyncClient(headers={"X-Client-Id": "bench-watch"}, timeout=httpx2.Timeout(60.0)) as whttp,
        Client(streamable_http_client(url, http_client=whttp), mode="legacy", message_handler=handler) as watcher,
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await watcher.subscribe_resource(memories_uri(AGENT))
        return await _measure(writer, stores, arrived.get)


async def listen_way(url: str, stores: int) -> list[float]:
    http, writer = await _writer(url)
    async with (
        http,
        writer,
        httpx2.AsyncClient(headers={"X-Client-Id": "bench-listen"}, timeout=httpx2.Timeout(60.0)) as lhttp,
        Client(streamable_http_client(url, http_client=lhttp), mode="auto") as listener,
        listener.listen(resource_subscriptions=[memories_uri(AGENT)]) as sub,
    ):

        async def next_event() -> float:
            await anext(sub)
            return time.perf_counter()

        return await _measure(writer, stores, next_event)


async def _measure(writer: Client, stores: int, arrival: Any) -> list[float]:
    # Warm up until one store is announced: the watcher's stream is open from then on (a session's
    # GET stream opens on its own after initialize; nothing reaches it before).
    for attempt in range(20):
        pending = asyncio.ensure_future(arrival())
        await _store(writer, -1 - attempt)
        try:
            async with asyncio.timeout(1):
                await pending
            break
        except TimeoutError:
            continue
    else:
        raise RuntimeError("no notification reached the watcher")
    out = []
    for i in range(stores):
        pending = asyncio.ensure_future(arrival())
        acked = await _store(writer, i)
        async with asyncio.timeout(30):
            got = await pending
        out.append(max(0.0, (got - acked) * 1000))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", type=int, default=300)
    parser.add_argument("--out", default="bench/results/mcp_notify.json", help="'-' prints only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(env={"MEMSTREAM_EMBEDDER": "none"}, data_dir=Path(tmp) / "data", sync="NORMAL")
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            session = asyncio.run(session_way(url, args.stores))
            listen = asyncio.run(listen_way(url, args.stores))
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    result = {
        "stores": args.stores,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "resources_subscribe_http_session": _summary(session),
        "subscriptions_listen_http": _summary(listen),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
