"""Who may erase (issue 16; docs/erasure.md, "Who may erase"): erase_memory needs write access
to the agent (as delete_memory does), erase_agent_data the admin grant (as delete_agent_data)."""

from __future__ import annotations

from typing import Any

from tests.support.acl import assert_denied
from tests.support.servers import ServerThread
from tests.system.test_acl import acl_server, as_client  # noqa: F401  (the module's fixtures)


async def test_erase_needs_write_and_erase_agent_data_needs_admin(as_client: Any, acl_server: ServerThread) -> None:  # noqa: F811
    writer, reader, other, plain, admin = (
        as_client(c) for c in ("rw-alice", "r-alice", "star-none-bob-rw", "rw-all-not-admin", "admin")
    )
    try:
        stored = await writer.call("store", {"agent_id": "alice", "content": "alice's erasable note about ferns"})
        mid = stored["id"]
        args = {"agent_id": "alice", "memory_id": mid, "reason": "request"}
        assert_denied(await reader.call("erase_memory", args), "erase_memory", "r-alice")
        assert_denied(await other.call("erase_memory", args), "erase_memory", "star-none-bob-rw")
        # Another agent's name cannot reach alice's record: decided in bob's partition, not found.
        crossed = await other.call("erase_memory", {"agent_id": "bob", "memory_id": mid, "reason": "request"})
        assert crossed["ok"] is False and crossed.get("error") != "permission_denied"
        done = await writer.call("erase_memory", args)
        assert done["ok"] is True, done
        body = await plain.call("erase_agent_data", {"agent_id": "alice", "reason": "request"})
        assert_denied(body, "erase_agent_data", "rw-all-not-admin")
        assert body["required"] == "admin"
        assert_denied(
            await writer.call("erase_agent_data", {"agent_id": "alice", "reason": "request"}),
            "erase_agent_data",
            "rw-alice",
        )
        wiped = await admin.call("erase_agent_data", {"agent_id": "alice", "reason": "account closed"})
        assert wiped["ok"] is True, wiped
    finally:
        for face in (writer, reader, other, plain, admin):
            await face.close()
