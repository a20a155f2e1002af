"""The Kafka router bounds a tool call's body as the embedded server does
(tests/system/test_tool_body_limit.py): over the limit it answers 413 ``too_large`` itself and
forwards nothing, declared or chunked; at the limit the call goes through to its worker."""

from __future__ import annotations

import uuid

import httpx
import pytest

from memstream.api.faces.tool_route import MAX_BODY_BYTES
from tests.support.deployment import shared_deployment
from tests.system.test_tool_body_limit import chunked

pytestmark = [pytest.mark.kafka]


@pytest.mark.parametrize("stream", [False, True], ids=["declared", "chunked"])
def test_the_router_refuses_a_body_over_the_limit(stream: bool) -> None:
    agent = f"kb-{uuid.uuid4().hex[:8]}"
    head = f'{{"agent_id": "{agent}", "content": "padded"}}'.encode()

    def post(http: httpx.Client, size: int) -> httpx.Response:
        body = head + b" " * (size - len(head))
        content = chunked(body) if stream else body
        return http.post("/v1/tools/store", content=content, headers={"content-type": "application/json"})

    with shared_deployment() as url, httpx.Client(base_url=url, timeout=60) as http:
        refused = post(http, MAX_BODY_BYTES + 1)
        assert refused.status_code == 413
        assert refused.headers["memstream-error"] == "too_large"
        answer = refused.json()
        assert answer["ok"] is False and answer["result"] == "rejected"
        assert f"over {MAX_BODY_BYTES} bytes" in answer["reason"]
        listed = http.post("/v1/tools/list_memories", json={"agent_id": agent}).json()
        assert listed["memories"] == []

        served = post(http, MAX_BODY_BYTES)
        assert served.status_code == 200, served.text
        assert served.json()["result"] == "stored"
