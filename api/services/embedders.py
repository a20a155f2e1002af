"""The embedders a process uses: the configured model, and any other an agent's vectors need.

Shared by the engine (embedded mode) and the Kafka worker's per-partition engines, so both
embed an agent's stores and queries with that agent's model (see ``embedder_for``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from memstream.api.services.embedding import Embedder, EmbeddingError, load_embedder, load_local_embedder
from memstream.api.services.settings import Settings
from memstream.streams.events import Embedding


class Embedders:
    def __init__(
        self, settings: Settings, embedder: Embedder | None = None, embedders: Mapping[str, Embedder] | None = None
    ) -> None:
        """``embedder`` is the configured model (new agents get it); ``embedders`` are other
        models by id, for agents whose vectors a re-embed moved elsewhere (else loaded by name)."""
        self.settings = settings
        self._embedder = embedder
        self._others: dict[str, Embedder] = dict(embedders or {})
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memstream-embed")

    @property
    def enabled(self) -> bool:
        """``MEMSTREAM_EMBEDDER=none`` (and no embedder injected): nothing is embedded."""
        return not (self.settings.embedder == "none" and self._embedder is None)

    @property
    def default(self) -> Embedder:
        if self._embedder is None:
            self._embedder = load_embedder(url=self.settings.embedding_url, name=self.settings.embedder)
        return self._embedder

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
        """Embeddings of ``texts`` by ``model`` (None: the configured one), off the event loop."""
        if not self.enabled:
            return [None] * len(texts)
        emb = self.embedder_for(model)
        vectors: np.ndarray = await asyncio.get_running_loop().run_in_executor(self._pool, emb.embed, list(texts))
        return [Embedding.from_vector(emb.model_id, v) for v in vectors]

    def close(self) -> None:
        self._pool.shutdown(wait=False)
