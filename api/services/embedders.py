"""The embedders a process uses: the configured model, and any other an agent's vectors need.

Shared by the engine (embedded mode) and the Kafka worker's per-partition engines, so both
embed an agent's stores and queries with that agent's model (see ``embedder_for``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from memstream.api.services.embed_batcher import EmbedBatcher
from memstream.api.services.embedding import Embedder, EmbeddingError, load_embedder, load_local_embedder
from memstream.api.services.settings import Settings
from memstream.streams.events import Embedding

log = logging.getLogger(__name__)


class Embedders:
    def __init__(
        self, settings: Settings, embedder: Embedder | None = None, embedders: Mapping[str, Embedder] | None = None
    ) -> None:
        """``embedder`` is the configured model (new agents get it); ``embedders`` are other
        models by id, for agents whose vectors a re-embed moved elsewhere (else loaded by name)."""
        self.settings = settings
        self._embedder = embedder
        self._others: dict[str, Embedder] = dict(embedders or {})
        self._pool = ThreadPoolExecutor(
            max_workers=max(2, settings.embed_concurrent_calls), thread_name_prefix="memstream-embed"
        )
        self._batchers: dict[int, EmbedBatcher] = {}  # by id() of the embedder they feed
        self._model_ids: dict[int, str] = {}  # the same keys: each batcher's model, for the log

    @property
    def enabled(self) -> bool:
        """``MEMSTREAM_EMBEDDER=none`` (and no embedder injected): nothing is embedded."""
        return not (self.settings.embedder == "none" and self._embedder is None)

    @property
    def default(self) -> Embedder:
        if self._embedder is None:
            self._embedder = load_embedder(url=self.settings.embedding_url, name=self.settings.embedder)
        return self._embedder

    def preload(self) -> None:
        """Load the configured model now (a start does it while the checkpoints load). One
        that cannot load is logged, not fatal: its calls fail as ``embedding_unavailable`` and
        retry the load, as they did when the first call loaded it."""
        if not self.enabled:
            return
        try:
            self.default  # noqa: B018 (a local model's session; an HTTP client, without a request)
        except Exception as exc:  # the first call that needs it raises it again, as before
            log.warning("the embedder did not load at start-up (%s); calls that need it will retry", exc)

    def embedder_for(self, model: str | None) -> Embedder:
        """The embedder producing vectors of ``model`` (None: the configured one).

        An agent's vectors are all of one model (the decider refuses others), and a re-embed
        can move an agent to a model this server is not configured with: its stores and queries
        must still be embedded with that agent's model, or they would match nothing."""
        base = self.default
        if model is None or model == base.model_id:
            return base
        emb = self._others.get(model)
        if emb is None:
            try:
                emb = load_local_embedder(model)
            except EmbeddingError as exc:
                raise EmbeddingError(f"this agent's vectors are of model {model!r}, not loadable here: {exc}") from exc
            self._others[model] = emb
        return emb

    async def embed(self, texts: Sequence[str], model: str | None) -> list[Embedding | None]:
        """Embeddings of ``texts`` by ``model`` (None: the configured one), off the event loop;
        requests that arrive together share one model call (``batcher``)."""
        if not self.enabled:
            return [None] * len(texts)
        emb = self.embedder_for(model)
        vectors = await self.batcher(emb).embed(texts)
        return [Embedding.from_vector(emb.model_id, v) for v in vectors]

    def batcher(self, emb: Embedder) -> EmbedBatcher:
        """The one batcher feeding ``emb`` (made on first use)."""
        batcher = self._batchers.get(id(emb))
        if batcher is None:
            batcher = EmbedBatcher(
                emb.embed,
                self._run_blocking,
                max_texts=self.settings.embed_batch_max,
                max_wait_s=self.settings.embed_batch_wait_ms / 1000,
                regroup=self.settings.embed_batch_regroup,
                regroup_max_s=self.settings.embed_batch_regroup_max_ms / 1000,
                concurrent_calls=self.settings.embed_concurrent_calls,
            )
            self._batchers[id(emb)] = batcher
            self._model_ids[id(emb)] = emb.model_id
        return batcher

    async def _run_blocking(self, call: Callable[[], np.ndarray]) -> np.ndarray:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        for emb_id, batcher in self._batchers.items():
            if batcher.calls:  # what the batching did, for an operator reading the log (INFO)
                log.info(
                    "embedder %s: %d texts in %d model calls (%.2f per call); %.1f s in calls, "
                    "%.1f s idle while a request waited; %d waits for callers to come back, %.1f s",
                    self._model_ids.get(emb_id, "?"),
                    batcher.texts,
                    batcher.calls,
                    batcher.texts / batcher.calls,
                    batcher.busy_s,
                    batcher.idle_waiting_s,
                    batcher.regroup_waits,
                    batcher.regroup_wait_s,
                )
        self._pool.shutdown(wait=False)
