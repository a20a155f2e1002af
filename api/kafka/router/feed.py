"""The change feed in Kafka mode: ``GET /v1/events`` on the router, read from the events topic.

Each subscription has its own group-less consumer, assigned to the partitions of the agents it
asked for (all of them without ``agent_id``), so no consumer group rebalances and the workers
do no work for it. A background task reads ahead into a bounded queue; a subscriber that falls
``buffer`` events behind is cut off (its consumer closed) with its resume position, exactly as
in embedded mode. Messages carry the same ``data`` as embedded mode's: the history entry, whose
``offset`` is the partition's.

Positions (docs/feed.md, "Positions"): a cursor over the partitions read, ``p:o`` pairs joined
by commas (``3:18,7:2``), where ``o`` is the next offset to read in partition ``p``. An event's
``id`` is the cursor just after it, so ``Last-Event-ID`` and ``from`` both continue at exactly
the cursor; ``from`` may also be one integer, that offset in every partition (``from=0``: from
the beginning). A partition the cursor does not name is read from its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from memstream.api.faces.feed import FeedRequest, FeedUnavailable, PositionError
from memstream.api.services.entries import history_entry
from memstream.api.services.feed import READ_BATCH, FeedCutOff, FeedFilter, frame
from memstream.streams.deciders.sealing import LazySealing
from memstream.streams.log.kafka import KafkaConfig, Opener, log_record, opened
from memstream.streams.log.port import partition_for

log = logging.getLogger(__name__)

MAX_OFFSET = 2**63 - 1


def encode_position(cursor: Mapping[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(cursor.items()))


def _offset(text: str, limit: int = MAX_OFFSET) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 19) or int(text) > limit:
        raise ValueError(text)
    return int(text)


def parse_position(text: str, partitions: int, what: str) -> dict[int, int]:
    """A cursor (``p:o,p:o``) or, for ``from``, one offset for every partition."""
    value = text.strip()
    try:
        if ":" not in value:
            return dict.fromkeys(range(partitions), _offset(value))
        cursor: dict[int, int] = {}
        for pair in value.split(","):
            p_text, _, o_text = pair.partition(":")
            p = _offset(p_text, partitions - 1)
            if p in cursor:
                raise ValueError(pair)
            cursor[p] = _offset(o_text)
        return cursor
    except ValueError:
        raise PositionError(
            f"{what} must be a position this feed gave (partition:offset pairs joined by commas) "
            f"or, for from, one offset; got {text[:60]!r}"
        ) from None


@dataclass(frozen=True, slots=True)
class KafkaFeedItem:
    position: str
    type: str
    data: str
    sse: bytes  # the SSE message (api/faces/feed.py ``frame``)


class KafkaStream:
    """One subscription: a consumer of its partitions, read ahead into a bounded queue."""

    def __init__(
        self, cfg: KafkaConfig, filter_: FeedFilter, partitions: list[int], buffer: int, opener: Opener | None = None
    ) -> None:
        self.cfg = cfg
        self.opener = opener
        self.filter = filter_
        self.partitions = partitions
        self.buffer = buffer
        self.cursor: dict[int, int] = {}
        self._queue: deque[KafkaFeedItem] = deque()
        self._ready = asyncio.Event()
        self._cut: FeedCutOff | None = None
        self._ended = False
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, start: Mapping[int, int]) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cfg.bootstrap,
            client_id=f"{self.cfg.client_id}-feed",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="latest",  # a cursor past a partition's end waits at the end
            fetch_max_wait_ms=50,
            request_timeout_ms=self.cfg.request_timeout_ms,
        )
        self._consumer = consumer
        try:
            await consumer.start()
            tps = [TopicPartition(self.cfg.events_topic, p) for p in self.partitions]
            consumer.assign(tps)
            at_end = [tp for tp in tps if tp.partition not in start]
            for tp in tps:
                if tp.partition in start:
                    consumer.seek(tp, start[tp.partition])
            if at_end:
                await consumer.seek_to_end(*at_end)
            for tp in tps:  # resolves "the end" now: what is acknowledged from here on is delivered
                self.cursor[tp.partition] = await consumer.position(tp)
        except (KafkaError, OSError) as exc:
            await self._stop_consumer()
            raise FeedUnavailable(f"the events topic could not be read: {type(exc).__name__}: {exc}") from exc
        self._task = asyncio.create_task(self._pump(), name="memstream-kafka-feed")

    async def _pump(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=1000, max_records=READ_BATCH)
                for tp in sorted(batch, key=lambda t: t.partition):
                    for rec in batch[tp]:
                        entry = log_record(opened(rec, self.opener, vectors=False), vectors=False)
                        if self.filter.admits(entry.agent_id, entry.type):
                            if len(self._queue) >= self.buffer:
                                reason = f"the subscriber fell more than {self.buffer} events behind"
                                self._cut = FeedCutOff(encode_position(self.cursor), reason)
                                return
                            self.cursor[rec.partition] = rec.offset + 1
                            data = orjson.dumps(history_entry(entry)).decode()
                            position = encode_position(self.cursor)
                            sse = frame(position, entry.type, data)
                            self._queue.append(KafkaFeedItem(position, entry.type, data, sse))
                        else:
                            self.cursor[rec.partition] = rec.offset + 1
                if batch:
                    self._ready.set()
        except KafkaError as exc:
            log.warning("change feed: reading the events topic failed, cutting a stream off: %s", exc)
            self._fail(f"reading the events topic failed: {type(exc).__name__}: {exc}")
        except Exception as exc:  # a record that cannot be opened (its key store unreachable)
            log.exception("change feed: a record of the events topic could not be read, cutting a stream off")
            self._fail(f"a record of the events topic could not be read: {type(exc).__name__}: {exc}")
        finally:
            self._ended = True
            self._ready.set()
            await self._stop_consumer()

    def _fail(self, reason: str) -> None:
        """A read that failed ends the stream as a cut-off at the cursor, never as a plain end:
        an end reads as "the server is closing", and a subscriber would wait for events nobody
        sends. Resuming at the position reads the failed record again."""
        if self._cut is None and not self._ended:
            self._cut = FeedCutOff(encode_position(self.cursor), reason)

    @property
    def cut(self) -> FeedCutOff | None:
        """Set once the subscriber has been cut off (what is queued is still handed out)."""
        return self._cut

    async def next_batch(self) -> list[KafkaFeedItem]:
        while not self._queue:
            if self._cut is not None:
                raise self._cut
            if self._ended:
                return []
            self._ready.clear()
            await self._ready.wait()
        out: list[KafkaFeedItem] = []
        while self._queue and len(out) < READ_BATCH:
            out.append(self._queue.popleft())
        return out

    def close(self) -> None:
        self._ended = True
        if self._task is not None:
            self._task.cancel()  # its finally closes the consumer

    async def _stop_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()


@dataclass(frozen=True)
class KafkaFeed:
    """The router's ``FeedSource`` (api/faces/feed.py)."""

    cfg: KafkaConfig
    # Opens sealed events; by default the process's key store, made at the first sealed event
    # (the master key is checked here, at once).
    opener: Opener | None = None

    def __post_init__(self) -> None:
        if self.opener is None:
            object.__setattr__(self, "opener", LazySealing(self.cfg))

    def close(self) -> None:
        if isinstance(self.opener, LazySealing):
            self.opener.close()

    async def open(self, request: FeedRequest) -> KafkaStream:
        n = self.cfg.partitions
        start: dict[int, int] = {}
        if request.after is not None:
            start = parse_position(request.after, n, "Last-Event-ID")
        elif request.at is not None:
            start = parse_position(request.at, n, "from")
        agents = request.agents
        partitions = sorted({partition_for(a, n) for a in agents}) if agents is not None else list(range(n))
        filter_ = FeedFilter.of(agents, request.types, request.readable)
        stream = KafkaStream(self.cfg, filter_, partitions, request.buffer, self.opener)
        await stream.start(start)
        return stream
