"""H3: reads accept ``as_of`` (a log offset or an instant) and answer from the state then."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.servers import ServerThread, log_end


async def test_h3_as_of_offset_and_time(face: Any) -> None:
    """Through a face only (also run in Kafka mode): the store's offset and time come from its
    history, as a caller would take them."""
    first = await face.call("store", {"agent_id": "t", "content": "the harbour gate code is 1234", "id": "g"})
    hist = await face.call("history", {"ref": f"mem:{first['id']}"})
    at_first, stored_at = hist["events"][0]["offset"], hist["events"][0]["at"]
    await face.call(
        "update_memory", {"agent_id": "t", "memory_id": first["id"], "content": "the harbour gate code is 9876"}
    )
    await face.call("store", {"agent_id": "t", "content": "the lighthouse opens at dawn", "id": "l"})
    await face.call("delete_memory", {"agent_id": "t", "memory_id": first["id"]})

    now = await face.call("get_contents", {"agent_id": "t", "refs": [f"mem:{first['id']}"]})
    assert now["missing"] == [f"mem:{first['id']}"]
    for as_of in (at_first, stored_at):
        then = await face.call("get_contents", {"agent_id": "t", "refs": [f"mem:{first['id']}"], "as_of": as_of})
        assert [i["content"] for i in then["items"]] == ["the harbour gate code is 1234"], (as_of, then)
        listing = await face.call("list_memories", {"agent_id": "t", "as_of": as_of})
        assert [m["content"] for m in listing["memories"]] == ["the harbour gate code is 1234"]
        recalled = await face.call("recall", {"agent_id": "t", "query": "the harbour gate code is", "as_of": as_of})
        assert [m["content"] for m in recalled["messages"]] == ["the harbour gate code is 1234"], recalled
    before = await face.call("list_memories", {"agent_id": "t", "as_of": "2000-01-01T00:00:00Z"})
    assert before["memories"] == []


async def test_h3_bad_as_of_is_a_clear_error(face: Any) -> None:
    await face.call("store", {"agent_id": "t2", "content": "something"})
    for bad in (10**9, "not a time", -1):
        body = await face.call("list_memories", {"agent_id": "t2", "as_of": bad})
        assert body["ok"] is False and body["error"]


@pytest.mark.embedded_only("reads the embedded server's log end")
async def test_h3_history_offsets_are_the_logs(face: Any, http_server: ServerThread) -> None:
    """The offset history shows for an event is the one ``as_of`` takes: the event's log offset."""
    first = await face.call("store", {"agent_id": "t3", "content": "an offset to check"})
    hist = await face.call("history", {"ref": f"mem:{first['id']}"})
    assert hist["events"][0]["offset"] == log_end(http_server)[0] - 1
