"""MemstreamSession against the OpenAI Agents SDK's documented Session semantics
(agents.memory.session), over Client.local and a real server, with a blocking and an async
client; and a real ``Runner.run`` whose model is scripted here (the SDK's Model interface, no
network), so the SDK itself reads the history from the session and adds each turn to it."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.integrations import PLACES, async_client, blocking_client, require_extra

require_extra("agents", "openai-agents")

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage  # noqa: E402
from agents.memory import Session, SessionSettings  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402

from memstream.client import AsyncClient, Client  # noqa: E402
from memstream.integrations.openai_agents import MemstreamSession  # noqa: E402


@pytest.fixture(params=[(mode, place) for mode in ("sync", "async") for place in PLACES], ids=lambda p: "-".join(p))
async def client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Client | AsyncClient]:
    mode, place = request.param
    if mode == "async":
        async with async_client(place, tmp_path) as aclient:
            yield aclient
    else:
        with blocking_client(place, tmp_path) as bclient:
            yield bclient


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


async def test_a_new_session_is_empty(client: Client | AsyncClient) -> None:
    session = MemstreamSession("s1", client)
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    assert await session.get_items() == []
    assert await session.get_items(limit=3) == []
    assert await session.pop_item() is None
    await session.clear_session()


async def test_items_come_back_in_order_and_limit_takes_the_latest(client: Client | AsyncClient) -> None:
    session = MemstreamSession("s1", client)
    items = [
        user("one"),
        assistant("two"),
        user("three"),
        {"type": "function_call_output", "call_id": "c1", "output": "4"},
    ]
    await session.add_items(items[:2])
    await session.add_items(items[2:])
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[2:]
    assert await session.get_items(limit=1) == items[3:]
    assert await session.get_items(limit=10) == items
    assert await session.get_items(limit=0) == []
    await session.add_items([])
    assert await session.get_items() == items


async def test_pop_returns_and_removes_the_most_recent(client: Client | AsyncClient) -> None:
    session = MemstreamSession("s1", client)
    await session.add_items([user("a"), assistant("b"), user("c")])
    assert await session.pop_item() == user("c")
    assert await session.get_items() == [user("a"), assistant("b")]
    assert await session.pop_item() == assistant("b")
    await session.add_items([user("d")])
    assert await session.get_items() == [user("a"), user("d")]
    assert await session.pop_item() == user("d")
    assert await session.pop_item() == user("a")
    assert await session.pop_item() is None


async def test_clear_removes_everything_and_the_session_goes_on(client: Client | AsyncClient) -> None:
    session = MemstreamSession("s1", client)
    await session.add_items([user("a"), assistant("b")])
    await session.clear_session()
    assert await session.get_items() == []
    await session.add_items([user("a")])
    assert await session.get_items() == [user("a")]


async def test_repeated_items_are_all_kept(client: Client | AsyncClient) -> None:
    """memstream keeps one copy of a text per bucket; a conversation repeats itself."""
    session = MemstreamSession("s1", client)
    await session.add_items([user("hi"), assistant("hello"), user("hi"), user("hi")])
    assert await session.get_items() == [user("hi"), assistant("hello"), user("hi"), user("hi")]
    assert await session.pop_item() == user("hi")
    assert await session.get_items() == [user("hi"), assistant("hello"), user("hi")]


async def test_sessions_are_separate_and_shared_by_id(client: Client | AsyncClient) -> None:
    a, b = MemstreamSession("a", client), MemstreamSession("b", client)
    c1, c2 = MemstreamSession("c1", client, agent_id="bot"), MemstreamSession("c2", client, agent_id="bot")
    await a.add_items([user("for a")])
    await b.add_items([user("for b")])
    await c1.add_items([user("same text"), user("for c1")])
    await c2.add_items([user("same text")])
    assert await a.get_items() == [user("for a")]
    assert await b.get_items() == [user("for b")]
    assert await c1.get_items() == [user("same text"), user("for c1")]
    assert await c2.get_items() == [user("same text")]
    await c2.clear_session()
    assert await c1.get_items() == [user("same text"), user("for c1")]
    # Another session object (another process, say) with the same id sees the same conversation.
    again = MemstreamSession("a", client)
    assert await again.get_items() == [user("for a")]
    await again.add_items([assistant("reply")])
    assert await a.get_items() == [user("for a"), assistant("reply")]
    assert await a.pop_item() == assistant("reply")
    assert await again.get_items() == [user("for a")]


async def test_session_settings_give_the_default_limit(client: Client | AsyncClient) -> None:
    session = MemstreamSession("s1", client, session_settings=SessionSettings(limit=2))
    await session.add_items([user("1"), user("2"), user("3")])
    assert await session.get_items() == [user("2"), user("3")]
    assert await session.get_items(limit=3) == [user("1"), user("2"), user("3")]


async def test_items_are_copies_and_survive_the_servers_text_cleaning(client: Client | AsyncClient) -> None:
    session = MemstreamSession("s1", client)
    item = user("[Memory from x] is kept, ünïcode too")
    await session.add_items([item])
    got = await session.get_items()
    assert got == [item]
    got[0]["content"] = "changed"
    assert await session.get_items() == [item]


def test_bad_session_ids_are_refused(tmp_path: Path) -> None:
    with blocking_client("local", tmp_path) as client:
        for bad in ("", "x" * 257):
            with pytest.raises(ValueError, match="session_id"):
                MemstreamSession(bad, client)


async def test_an_item_over_the_content_limit_adds_nothing(tmp_path: Path) -> None:
    async with async_client("local", tmp_path, max_content_chars=100) as aclient:
        session = MemstreamSession("s1", aclient)
        await session.add_items([user("before")])
        with pytest.raises(ValueError, match="too long"):
            await session.add_items([user("fits"), user("x" * 500), user("never reached")])
        assert await session.get_items() == [user("before")]
        listing = await aclient.list_memories(agent_id="s1")
        assert [m.content for m in listing.memories] == ['{"role": "user", "content": "before"}']


# -- a real run -----------------------------------------------------------------------------------


class ScriptedModel(Model):
    """Answers each turn with the next scripted text and keeps what the SDK sent it."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(copy.deepcopy(input))
        text = self.replies.pop(0)
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the test runs without streaming")


def _said(items: list[Any]) -> list[tuple[str, str]]:
    """(role, text) of each message item, whatever shape its content has."""
    out = []
    for item in items:
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        out.append((item.get("role"), content))
    return out


@pytest.mark.parametrize("place", PLACES)
async def test_runner_run_keeps_the_conversation_in_the_session(place: str, tmp_path: Path) -> None:
    async with async_client(place, tmp_path) as aclient:
        model = ScriptedModel(["Nice to meet you, Ada.", "Your name is Ada."])
        agent = Agent(name="helper", instructions="Be brief.", model=model)
        config = RunConfig(tracing_disabled=True)
        session = MemstreamSession("conversation-42", aclient)

        first = await Runner.run(agent, "My name is Ada.", session=session, run_config=config)
        assert first.final_output == "Nice to meet you, Ada."
        second = await Runner.run(
            agent, "What is my name?", session=MemstreamSession("conversation-42", aclient), run_config=config
        )
        assert second.final_output == "Your name is Ada."

        # The second turn reached the model with the first one in front of it, read from memstream.
        assert _said(model.inputs[1]) == [
            ("user", "My name is Ada."),
            ("assistant", "Nice to meet you, Ada."),
            ("user", "What is my name?"),
        ]
        assert _said(await session.get_items()) == [
            ("user", "My name is Ada."),
            ("assistant", "Nice to meet you, Ada."),
            ("user", "What is my name?"),
            ("assistant", "Your name is Ada."),
        ]
        # And the conversation is memstream's: four memories in channel conversation-42.
        listing = await aclient.list_memories(agent_id="conversation-42")
        assert listing.count == 4 and {m.channel for m in listing.memories} == {"conversation-42"}
