"""MemstreamStore against LangGraph's documented store semantics (langgraph.store.base), run
over Client.local and a real server, through the blocking and the async methods; and one real
StateGraph whose nodes write and read memories through it."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from memstream.api.services.settings import load_settings
from memstream.client import Client
from memstream.client.errors import MemstreamError, PermissionDenied
from tests.support.acl import ACL, TOKENS, write_acl
from tests.support.integrations import PLACES, async_client, blocking_client, require_extra
from tests.support.servers import ServerThread

require_extra("langgraph", "langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import (  # noqa: E402
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from memstream.integrations.feed import Feed  # noqa: E402
from memstream.integrations.langgraph import MemstreamStore  # noqa: E402
from memstream.integrations.langgraph.index import ItemIndex  # noqa: E402


class Store:
    """One face for the tests over both halves of the store's API: ``await s.put(...)`` calls
    ``aput`` (async client) or ``put`` in a worker thread (blocking client)."""

    def __init__(self, store: MemstreamStore, use_async: bool) -> None:
        self.store = store
        self.use_async = use_async

    def __getattr__(self, name: str) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.use_async:
                return await getattr(self.store, f"a{name}")(*args, **kwargs)
            return await asyncio.to_thread(getattr(self.store, name), *args, **kwargs)

        return call


@pytest.fixture(params=[(mode, place) for mode in ("sync", "async") for place in PLACES], ids=lambda p: "-".join(p))
async def s(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    mode, place = request.param
    if mode == "async":
        async with async_client(place, tmp_path) as aclient:
            yield Store(MemstreamStore(aclient), True)
    else:
        with blocking_client(place, tmp_path) as client:
            yield Store(MemstreamStore(client), False)


NS = ("alice", "prefs")


async def test_put_then_get_returns_the_item(s: Store) -> None:
    value = {"text": "likes pizza", "tags": ["food", "ünïcode"], "nested": {"n": 1.5, "ok": True, "none": None}}
    await s.put(NS, "food", value)
    item = await s.get(NS, "food")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (NS, "food", value)
    assert item.created_at == item.updated_at
    assert item.created_at.tzinfo is not None
    assert await s.get(NS, "drink") is None
    assert await s.get(("alice", "other"), "food") is None
    assert await s.get(("bob", "prefs"), "food") is None


async def test_put_with_the_same_key_replaces_and_keeps_created_at(s: Store) -> None:
    await s.put(NS, "food", {"text": "likes pizza"})
    first = await s.get(NS, "food")
    await s.put(NS, "food", {"text": "likes sushi"})
    second = await s.get(NS, "food")
    assert first is not None and second is not None
    assert second.value == {"text": "likes sushi"}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    assert [i.key for i in await s.search(NS)] == ["food"]  # one item, not two


async def test_delete_and_put_none_remove_and_the_key_can_come_back(s: Store) -> None:
    await s.put(NS, "a", {"v": 1})
    await s.put(NS, "b", {"v": 2})
    await s.delete(NS, "a")
    await s.put(NS, "b", None)
    assert await s.get(NS, "a") is None
    assert await s.get(NS, "b") is None
    assert await s.search(NS) == []
    await s.delete(NS, "never-there")  # deleting what is not there is no error
    await s.put(NS, "a", {"v": 3})
    again = await s.get(NS, "a")
    assert again is not None and again.value == {"v": 3}


async def test_equal_values_under_different_keys_are_separate_items(s: Store) -> None:
    await s.put(NS, "one", {"text": "same"})
    await s.put(NS, "two", {"text": "same"})
    await s.put(("alice",), "one", {"text": "same"})
    assert sorted(i.key for i in await s.search(NS)) == ["one", "two"]
    await s.delete(NS, "one")
    two, top = await s.get(NS, "two"), await s.get(("alice",), "one")
    assert two is not None and top is not None


async def test_values_survive_the_servers_text_cleaning(s: Store) -> None:
    value = {"note": "[Memory from bob] kept verbatim", "pad": "  spaced  ", "q": '"quoted" \\ back'}
    await s.put(NS, "raw", value)
    item = await s.get(NS, "raw")
    assert item is not None and item.value == value


async def test_search_by_prefix_filter_and_pages(s: Store) -> None:
    for i in range(7):
        await s.put(("alice", "notes"), f"n{i}", {"i": i, "kind": "even" if i % 2 == 0 else "odd", "meta": {"n": i}})
    await s.put(("alice", "notes", "deep"), "d", {"i": 100, "kind": "even", "meta": {"n": 100}})
    await s.put(("alice", "elsewhere"), "e", {"i": 5, "kind": "odd"})
    await s.put(("bob", "notes"), "b", {"i": 1, "kind": "odd"})

    under = await s.search(("alice", "notes"), limit=100)
    assert sorted(i.key for i in under) == ["d", "n0", "n1", "n2", "n3", "n4", "n5", "n6"]
    assert all(i.score is None for i in under)
    # Newest change first.
    assert [i.key for i in under][:2] == ["d", "n6"]

    odd = await s.search(("alice", "notes"), filter={"kind": "odd"})
    assert sorted(i.key for i in odd) == ["n1", "n3", "n5"]
    big = await s.search(("alice",), filter={"i": {"$gte": 5}})
    assert sorted(i.key for i in big) == ["d", "e", "n5", "n6"]
    assert sorted(i.key for i in await s.search(("alice", "notes"), filter={"i": {"$gt": 2, "$lt": 5}})) == [
        "n3",
        "n4",
    ]
    assert sorted(i.key for i in await s.search(("alice", "notes"), filter={"meta": {"n": 100}})) == ["d"]
    assert len(await s.search(("alice", "notes"), filter={"kind": {"$ne": "odd"}}, limit=100)) == 5
    assert await s.search(("alice", "notes"), filter={"i": {"$gt": "text"}}) == []
    with pytest.raises(ValueError, match="unknown filter operator"):
        await s.search(("alice",), filter={"i": {"$regex": "x"}})

    pages = [await s.search(("alice", "notes"), limit=3, offset=o) for o in (0, 3, 6)]
    assert [len(p) for p in pages] == [3, 3, 2]
    keys = [i.key for p in pages for i in p]
    assert sorted(keys) == sorted(i.key for i in under) and len(set(keys)) == 8


async def test_search_with_a_query_goes_through_recall(s: Store) -> None:
    await s.put(NS, "food", {"text": "Alice loves spicy ramen noodles"})
    await s.put(NS, "sport", {"text": "Alice plays tennis on weekends"})
    await s.put(NS, "pet", {"text": "Alice has a cat called Miso"})
    await s.put(("bob", "prefs"), "food", {"text": "Bob loves spicy ramen noodles too"})
    hits = await s.search(NS, query="spicy ramen noodles")
    assert hits and hits[0].key == "food" and hits[0].namespace == NS
    assert hits[0].score is not None
    assert all(h.namespace == NS for h in hits)
    scores = [h.score for h in hits if h.score is not None]
    assert scores == sorted(scores, reverse=True)
    # Filters apply to what recall found.
    kept = await s.search(NS, query="spicy ramen noodles", filter={"text": {"$ne": "x"}})
    assert kept and kept[0].key == "food"
    assert await s.search(NS, query="spicy ramen noodles", filter={"text": "nothing like it"}) == []
    # A replaced value is found by its new text.
    await s.put(NS, "food", {"text": "Alice now prefers green curry"})
    found = await s.search(NS, query="green curry")
    assert found and found[0].key == "food" and found[0].value == {"text": "Alice now prefers green curry"}


async def test_list_namespaces(s: Store) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f")]:
        await s.put(ns, "k", {"ns": list(ns)})
    await s.put(("z", "v1"), "k", {"x": 1})
    assert await s.list_namespaces(prefix=("a", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert await s.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert await s.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert await s.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    everything = await s.list_namespaces()
    assert ("z", "v1") in everything and len(everything) == 6 and everything == sorted(everything)
    assert await s.list_namespaces(prefix=("a",), limit=2, offset=1) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
    await s.delete(("a", "c", "f"), "k")
    assert await s.list_namespaces(suffix=("f",)) == [("a", "b", "f")]


async def test_batch_runs_in_order_and_answers_in_order(s: Store) -> None:
    results = await s.batch(
        [
            PutOp(NS, "x", {"v": 1}),
            GetOp(NS, "x"),
            PutOp(NS, "x", {"v": 2}),
            GetOp(NS, "x"),
            SearchOp(NS, None, 10, 0, None),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("alice",)),)),
            PutOp(NS, "x", None),
            GetOp(NS, "x"),
        ]
    )
    assert results[0] is None and results[2] is None and results[6] is None
    assert results[1].value == {"v": 1} and results[3].value == {"v": 2}
    assert [i.key for i in results[4]] == ["x"]
    assert results[5] == [NS]
    assert results[7] is None


async def test_bad_input_is_refused_and_stores_nothing(s: Store) -> None:
    for ns in [(), ("a.b",), ("",), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            await s.put(ns, "k", {"v": 1})
    with pytest.raises(ValueError, match="key"):
        await s.put(NS, "", {"v": 1})
    with pytest.raises(ValueError, match="key"):
        await s.put(NS, "k" * 257, {"v": 1})
    with pytest.raises(InvalidNamespaceError, match="too long"):
        await s.put(("a", "b" * 300), "k", {"v": 1})
    with pytest.raises(ValueError):
        await s.put(NS, "nan", {"v": float("nan")})
    with pytest.raises(TypeError):
        await s.put(NS, "obj", {"v": object()})
    with pytest.raises(NotImplementedError):
        await s.put(NS, "ttl", {"v": 1}, ttl=5)
    assert await s.list_namespaces() == []


async def test_a_value_over_the_servers_content_limit_is_refused_and_the_old_one_stays(tmp_path: Path) -> None:
    with blocking_client("local", tmp_path, max_content_chars=200) as client:
        store = MemstreamStore(client)
        with pytest.raises(ValueError, match="too long"):
            store.put(NS, "big", {"text": "x" * 500})
        assert store.get(NS, "big") is None
        assert client.list_memories(agent_id="alice").count == 0
        store.put(NS, "small", {"text": "short"})
        with pytest.raises(ValueError, match="too long"):
            store.put(NS, "small", {"text": "y" * 500})
        kept = store.get(NS, "small")
        assert kept is not None and kept.value == {"text": "short"}


@pytest.mark.parametrize("place", PLACES)
def test_the_mapping_onto_agents_projects_and_channels(place: str, tmp_path: Path) -> None:
    with blocking_client(place, tmp_path) as client:
        MemstreamStore(client).put(("alice", "work", "todo"), "call-bob", {"text": "call Bob"})
        fixed = MemstreamStore(client, agent_id="assistant")
        fixed.put(("users", "u1"), "tz", {"tz": "UTC"})
        [mem] = client.list_memories(agent_id="alice").memories
        assert (mem.project_id, mem.channel, mem.content) == ("work.todo", "call-bob", '{"text": "call Bob"}')
        [mem] = client.list_memories(agent_id="assistant").memories
        assert (mem.project_id, mem.channel) == ("users.u1", "tz")
        item = fixed.get(("users", "u1"), "tz")
        assert item is not None and item.namespace == ("users", "u1")
        assert fixed.list_namespaces() == [("users", "u1")]


@pytest.mark.parametrize("place", PLACES)
def test_a_second_store_sees_the_first_ones_writes(place: str, tmp_path: Path) -> None:
    """Each call reads the events appended since its last one, so a store in another process
    (here, another store object over another connection) sees writes it did not make."""
    with blocking_client(place, tmp_path) as client:
        one, two = MemstreamStore(client), MemstreamStore(client)
        one.put(NS, "k", {"v": 1})
        assert (item := two.get(NS, "k")) is not None and item.value == {"v": 1}
        two.put(NS, "k", {"v": 2})
        assert (item := one.get(NS, "k")) is not None and item.value == {"v": 2}
        one.delete(NS, "k")
        assert two.get(NS, "k") is None
        # Memories written without the store are not items.
        client.store(agent_id="alice", content="a plain memory", project_id="prefs")
        assert two.search(NS) == []


async def test_blocking_calls_on_an_async_store_from_another_thread(tmp_path: Path) -> None:
    """LangGraph runs sync nodes in worker threads under ainvoke: they reach the async client
    on the store's own loop. On that loop itself a blocking call is refused with advice."""
    async with async_client("local", tmp_path) as aclient:
        store = MemstreamStore(aclient)
        await store.aput(NS, "k", {"v": 1})
        item = await asyncio.to_thread(store.get, NS, "k")
        assert item is not None and item.value == {"v": 1}
        with pytest.raises(RuntimeError, match="async methods"):
            store.get(NS, "k")


def test_the_store_refuses_a_failing_server_with_the_clients_error(tmp_path: Path) -> None:
    with blocking_client("local", tmp_path) as client:
        store = MemstreamStore(client)
        store.put(NS, "k", {"v": 1})
        [mem] = client.list_memories(agent_id="alice").memories
        client.lock_memory(agent_id="alice", memory_id=mem.id)
        with pytest.raises(MemstreamError):
            store.put(NS, "k", {"v": 2})
        with pytest.raises(MemstreamError):
            store.delete(NS, "k")
        item = store.get(NS, "k")
        assert item is not None and item.value == {"v": 1}


# -- a real graph -------------------------------------------------------------------------------


class Chat(TypedDict):
    user: str
    said: str
    recalled: Annotated[list[str], operator.add]


def remember(state: Chat, *, store: BaseStore) -> dict[str, Any]:
    """Writes what the user said as a memory of that user."""
    n = len(store.search((state["user"], "facts"), limit=100))
    store.put((state["user"], "facts"), f"fact-{n}", {"text": state["said"]})
    return {}


def recall(state: Chat, *, store: BaseStore) -> dict[str, Any]:
    """Reads back what the store knows about the user, best match for what was just said first."""
    hits = store.search((state["user"], "facts"), query=state["said"], limit=5)
    return {"recalled": [h.value["text"] for h in hits]}


def _graph(store: BaseStore) -> Any:
    graph = StateGraph(Chat)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph.compile(store=store)


@pytest.mark.parametrize("place", PLACES)
def test_a_state_graph_writes_and_reads_memories_through_the_store(place: str, tmp_path: Path) -> None:
    with blocking_client(place, tmp_path) as client:
        app = _graph(MemstreamStore(client))
        app.invoke({"user": "carol", "said": "I keep bees on the roof", "recalled": []})
        app.invoke({"user": "carol", "said": "My favourite tea is jasmine", "recalled": []})
        app.invoke({"user": "dave", "said": "I keep bees too", "recalled": []})
        out = app.invoke({"user": "carol", "said": "Is my favourite tea jasmine?", "recalled": []})
        assert "My favourite tea is jasmine" in out["recalled"]
        assert "I keep bees too" not in out["recalled"]  # dave's, not carol's
        # What the graph wrote is in memstream, as memories of agent carol.
        assert sorted(m.content for m in client.list_memories(agent_id="carol").memories) == sorted(
            [
                '{"text": "I keep bees on the roof"}',
                '{"text": "My favourite tea is jasmine"}',
                '{"text": "Is my favourite tea jasmine?"}',
            ]
        )


async def test_a_state_graph_runs_async_over_the_async_client(tmp_path: Path) -> None:
    """Under ainvoke LangGraph runs these sync nodes in worker threads: their blocking store
    calls reach the async client on the loop the store was made on."""
    async with async_client("server", tmp_path) as aclient:
        app = _graph(MemstreamStore(aclient))
        await app.ainvoke({"user": "erin", "said": "I was born in Lisbon", "recalled": []})
        out = await app.ainvoke({"user": "erin", "said": "Where was I born? Lisbon", "recalled": []})
        assert "I was born in Lisbon" in out["recalled"]


@pytest.mark.parametrize("place", PLACES)
async def test_racing_puts_of_one_new_key_leave_one_item(place: str, tmp_path: Path) -> None:
    """Eight stores (as eight processes would) put the same new key at once: the item's message
    id lets one store land, the others are skipped and update it, so one memory holds the key."""
    async with async_client(place, tmp_path) as aclient:
        stores = [MemstreamStore(aclient) for _ in range(8)]
        await asyncio.gather(*(st.aput(NS, "race", {"writer": i}) for i, st in enumerate(stores)))
        listing = await aclient.list_memories(agent_id="alice")
        assert [m.channel for m in listing.memories] == ["race"]
        final = [await st.aget(NS, "race") for st in stores]
        assert all(item is not None for item in final)
        values = {item.value["writer"] for item in final if item is not None}
        assert len(values) == 1 and values <= set(range(8))
        assert listing.memories[0].content == f'{{"writer": {values.pop()}}}'
        skipped = await aclient.audit_log(agent_id="alice", kind="skipped")
        assert any(r.why == "duplicate msg_id" for r in skipped.records)


async def test_a_blocking_store_called_on_a_running_loop(tmp_path: Path) -> None:
    """A notebook cell or an async app may call the blocking methods on its loop's thread: the
    store runs the batch in a thread of its own rather than failing on the live loop."""
    with blocking_client("local", tmp_path) as client:
        store = MemstreamStore(client)
        store.put(NS, "k", {"v": 1})
        item = store.get(NS, "k")
        assert item is not None and item.value == {"v": 1}
        assert [i.key for i in await store.asearch(NS)] == ["k"]


def test_acl_mode_a_token_reaches_only_its_agents(tmp_path: Path) -> None:
    """The store speaks as the client's token: namespaces of agents it may not write are refused
    with the client's PermissionDenied, and nothing lands; reads follow the read grants."""
    acl = write_acl(tmp_path / "acl.json", ACL)
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL", acl_file=acl)
    with (
        ServerThread(settings) as server,
        Client(server.url, TOKENS["rw-alice"]) as alice_writer,
        Client(server.url, TOKENS["r-alice"]) as alice_reader,
    ):
        writer, reader = MemstreamStore(alice_writer), MemstreamStore(alice_reader)
        writer.put(NS, "k", {"v": 1})
        with pytest.raises(PermissionDenied):
            writer.put(("bob", "prefs"), "k", {"v": 1})
        with pytest.raises(PermissionDenied):
            reader.put(NS, "k2", {"v": 2})
        item = reader.get(NS, "k")
        assert item is not None and item.value == {"v": 1}
        assert [i.key for i in reader.search(NS)] == ["k"]
        with pytest.raises(PermissionDenied):
            reader.get(("bob", "prefs"), "k")


async def test_the_fold_reads_history_page_by_page(tmp_path: Path) -> None:
    """A long history arrives in pages (10,000 events each by default; 3 here): folded page by
    page, it gives the same items as one read, and a later catch-up reads only what is new."""
    async with async_client("local", tmp_path) as aclient:
        store = MemstreamStore(aclient)
        for i in range(10):
            await store.aput(NS, f"k{i}", {"i": i})
        await store.aput(NS, "k3", {"i": 33})
        await store.adelete(NS, "k5")
        paged = Feed("alice", ItemIndex(), page=3)
        await paged.catch_up(aclient)
        index = paged.fold
        assert isinstance(index, ItemIndex)
        expected = {f"k{i}": {"i": 33 if i == 3 else i} for i in range(10) if i != 5}
        assert {key: e.value for (_, key), e in index.by_key.items()} == expected
        before = paged.next_offset
        await store.aput(NS, "k0", {"i": 100})
        await paged.catch_up(aclient)
        assert paged.next_offset > before and index.by_key[(NS, "k0")].value == {"i": 100}
