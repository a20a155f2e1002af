"""The Kafka command bus: how a router or worker submits in Kafka mode, instead of the embedded bus.

``submit`` sends the command to its agent's partition of the commands topic and waits for the
decider's reply on this process's own partition of the replies topic (chosen from a random
instance id, read from its end at start, without a consumer group). The answer therefore only
comes after the decider has appended the command's events with ``acks=all``: an acknowledged
write is on the cluster. A command whose reply does not come within the deadline fails with
``LogUnavailable``; it may still be decided later, which is why callers retry with the same
command id (W9): the retry is answered with the first outcome and appends nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import zlib

from aiokafka import AIOKafkaConsumer, TopicPartition

from memstream.streams.commands import Command
from memstream.streams.deciders.codec import decode_reply, encode_command, encode_refusal
from memstream.streams.events import AuditRecord
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, OutRecord, ensure_topics
from memstream.streams.log.port import Committed, LogUnavailable, partition_for

log = logging.getLogger(__name__)


class KafkaCommandBus:
    def __init__(self, cfg: KafkaConfig, *, reply_timeout_s: float = 30.0, instance_id: str | None = None) -> None:
        self.cfg = cfg
        self.reply_timeout_s = reply_timeout_s
        self.instance_id = instance_id or uuid.uuid4().hex
        self.reply_partition = zlib.crc32(self.instance_id.encode()) % cfg.partitions
        self.kafka = KafkaLog(cfg)
        self._replies: AIOKafkaConsumer | None = None
        self._pending: dict[str, list[asyncio.Future[Committed]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await ensure_topics(self.cfg)
        await self.kafka.start()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cfg.bootstrap,
            client_id=f"{self.cfg.client_id}-replies",
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=self.cfg.request_timeout_ms,
        )
        await consumer.start()
        tp = TopicPartition(self.cfg.replies_topic, self.reply_partition)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)  # resolve "end" now: replies to commands sent after this are seen
        self._replies = consumer
        self._task = asyncio.create_task(self._read_replies(tp), name="memstream-kafka-replies")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._replies is not None:
            with contextlib.suppress(Exception):
                await self._replies.stop()
            self._replies = None
        await self.kafka.close()
        for futures in self._pending.values():
            for fut in futures:
                if not fut.done():
                    fut.set_exception(LogUnavailable("the command bus closed before the decision arrived"))
        self._pending.clear()

    async def _read_replies(self, tp: TopicPartition) -> None:
        assert self._replies is not None
        while True:
            batch = await self._replies.getmany(tp, timeout_ms=500)
            for rec in batch.get(tp, []):
                try:
                    command_id, committed = decode_reply(rec.value or b"")
                except Exception:
                    log.exception("unreadable reply at %s offset %d", tp, rec.offset)
                    continue
                for fut in self._pending.pop(command_id, []):
                    if not fut.done():
                        fut.set_result(committed)

    # -- the port ---------------------------------------------------------------------------

    async def submit(self, command: Command) -> Committed:
        value, headers = encode_command(command, self.reply_partition)
        return await self._send(command.scope.agent_id, command.command_id, value, headers)

    async def record_refusal(self, record: AuditRecord) -> Committed:
        value, headers = encode_refusal(record, self.reply_partition)
        return await self._send(record.scope.agent_id, record.command_id, value, headers)

    async def _send(self, agent_id: str, command_id: str, value: bytes, headers: list[tuple[str, bytes]]) -> Committed:
        if self._task is None:
            raise RuntimeError("the command bus is not started")
        fut: asyncio.Future[Committed] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(command_id, []).append(fut)
        partition = partition_for(agent_id, self.cfg.partitions)
        try:
            key = agent_id.encode("utf-8", "surrogatepass")
            await self.kafka.send(self.cfg.commands_topic, [OutRecord(partition, key, value, headers)])
            return await asyncio.wait_for(asyncio.shield(fut), self.reply_timeout_s)
        except TimeoutError:
            raise LogUnavailable(
                f"no decider answered within {self.reply_timeout_s:.0f} s (are `memstream worker` processes running?); "
                "the command may still be decided: retry with the same command_id"
            ) from None
        except LogUnavailable:
            raise
        except Exception as exc:
            raise LogUnavailable(f"the command could not be sent to Kafka: {type(exc).__name__}: {exc}") from exc
        finally:
            waiting = self._pending.get(command_id)
            if waiting is not None and fut in waiting:
                waiting.remove(fut)
                if not waiting:
                    del self._pending[command_id]
