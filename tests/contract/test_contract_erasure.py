"""E1 (docs/contracts.md): the erase tools through both faces. Deeper checks (raw bytes,
backups, crashes) are in tests/system/test_erasure*.py."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.embedded_only("erasure is embedded-only until Kafka mode has a key store (docs/erasure.md)")

SECRET = "Ottoline Vashti-Brandt keeps her spare key under the blue heron statue"


async def test_e1_erase_memory_and_episode(face: Any) -> None:
    stored = await face.call("store", {"agent_id": "e", "content": SECRET, "lock": True})
    kept = await face.call("store", {"agent_id": "e", "content": "the garden gate squeaks"})
    episode = await face.call("archive_episode", {"agent_id": "e", "summary": "Ottoline talked about the heron"})
    out = await face.call("erase_memory", {"agent_id": "e", "memory_id": stored["id"], "reason": "subject request"})
    assert out["ok"] is True and out["erased"] == [f"mem:{stored['id']}"]
    assert out["locked_overridden"] == [f"mem:{stored['id']}"] and out["unreachable"] == []
    ep = await face.call("erase_memory", {"agent_id": "e", "ref": f"ep:{episode['episode_id']}", "reason": "r"})
    assert ep["ok"] is True and ep["erased_episodes"] == 1
    answers = [
        await face.call("list_memories", {"agent_id": "e"}),
        await face.call("list_episodes", {"agent_id": "e"}),
        await face.call("recall", {"agent_id": "e", "query": "spare key heron statue"}),
        await face.call("get_contents", {"agent_id": "e", "refs": [f"mem:{stored['id']}"]}),
        await face.call("history", {"ref": f"mem:{stored['id']}"}),
    ]
    text = repr(answers)
    assert "Ottoline" not in text and "heron" not in text
    assert "garden gate" in repr(answers[0]) and kept["id"]
    history = answers[-1]
    kinds = [e.get("type") for e in history["events"]]
    assert kinds[-1] == "record.erased", history
    again = await face.call("erase_memory", {"agent_id": "e", "memory_id": stored["id"], "reason": "again"})
    assert again["ok"] is False and "not found" in again["error"]


async def test_e1_erase_agent_data(face: Any) -> None:
    await face.call("store", {"agent_id": "f", "content": SECRET, "lock": True})
    await face.call("update_profile", {"agent_id": "f", "profile": "Ottoline's assistant"})
    out = await face.call("erase_agent_data", {"agent_id": "f", "reason": "account closed"})
    assert out["ok"] is True and out["erased_memories"] == 1 and out["erased_profile"] is True
    assert "Ottoline" not in repr(await face.call("get_profile", {"agent_id": "f"}))
    assert (await face.call("list_memories", {"agent_id": "f"}))["memories"] == []


@pytest.mark.parametrize(
    "args",
    [
        {"agent_id": "g", "memory_id": 1},
        {"agent_id": "g", "memory_id": 1, "reason": ""},
        {"agent_id": "g", "reason": "neither id nor ref"},
        {"agent_id": "g", "memory_id": 1, "reason": "r", "unknown": 1},
    ],
)
async def test_e1_bad_input_is_refused(face: Any, args: dict[str, Any]) -> None:
    out = await face.call("erase_memory", args)
    assert out.get("ok") is False and out.get("error"), out
