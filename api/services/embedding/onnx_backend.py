"""Sentence-transformers-style embedders run on onnxruntime (no torch): WordPiece, length-sorted
chunks, mean pooling and L2 normalisation as sentence-transformers does them. See
docs/embedding.md, "How the default model runs".
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .chunking import plan_runs
from .errors import EmbeddingError
from .wordpiece import WordPieceTokenizer

__all__ = ["SPIN_MODES", "OnnxMeanPoolEmbedder", "default_spin", "default_threads"]

DATA_DIR = Path(__file__).resolve().parent / "data"
VOCAB_PATH = DATA_DIR / "vocab.txt"

_tokenizer_lock = threading.Lock()
_tokenizer: WordPieceTokenizer | None = None


def bert_uncased_tokenizer() -> WordPieceTokenizer:
    """The shared bert-base-uncased WordPiece tokenizer (vocab committed under data/)."""
    global _tokenizer
    with _tokenizer_lock:
        if _tokenizer is None:
            _tokenizer = WordPieceTokenizer(VOCAB_PATH)
        return _tokenizer


def _env_count(name: str) -> int | None:
    """A positive integer from env ``name`` (None when unset)."""
    env = os.environ.get(name)
    if not env:
        return None
    try:
        n = int(env)
    except ValueError:
        raise EmbeddingError(f"{name} must be an integer, got {env!r}") from None
    if n < 1:
        raise EmbeddingError(f"{name} must be >= 1, got {n}")
    return n


def default_threads() -> int:
    """intra-op threads: env MEMSTREAM_EMBEDDING_THREADS, else min(2, cores) shared among the
    MEMSTREAM_EMBED_CONCURRENT_CALLS calls that may run at once (at least 1 each): two calls
    of 1 thread embed ~4-text batches faster than one call of 2 at a time (docs/embedding.md,
    "Two model calls at once")."""
    threads = _env_count("MEMSTREAM_EMBEDDING_THREADS")
    if threads is not None:
        return threads
    calls = _env_count("MEMSTREAM_EMBED_CONCURRENT_CALLS") or 1
    return max(1, min(2, os.cpu_count() or 1) // calls)


# How the intra-op threads wait for a call's next operator, as session config entries
# (``session.intra_op.allow_spinning``, ``session.force_spinning_stop``):
# - ``call``: they spin while a call runs and sleep when it ends;
# - ``always``: onnxruntime's default, they also spin on after a call (up to ~40 ms of CPU a call
#   when the next is far off);
# - ``never``: they sleep between operators too (each wake-up lengthens a small call).
SPIN_MODES: dict[str, tuple[str, str]] = {"call": ("1", "1"), "always": ("1", "0"), "never": ("0", "0")}


def default_spin() -> str:
    """env MEMSTREAM_EMBEDDING_SPIN (``call``, ``always`` or ``never``), else ``call``: spinning
    within a call made 8 clients' calls of 8 texts faster, and sleeping after it leaves the cores
    to the rest of a store (docs/embedding.md, "Spinning within a call")."""
    env = os.environ.get("MEMSTREAM_EMBEDDING_SPIN", "").strip().lower()
    if not env:
        return "call"
    if env not in SPIN_MODES:
        raise EmbeddingError(f"MEMSTREAM_EMBEDDING_SPIN must be one of {', '.join(SPIN_MODES)}, got {env!r}")
    return env


class OnnxMeanPoolEmbedder:
    """A BERT-family ONNX encoder whose first output is ``last_hidden_state`` (batch, seq, dim)."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        model_id: str,
        dim: int,
        max_seq_length: int,
        output_name: str | None = None,
        normalize: bool = True,
        chunk_size: int = 8,
        chunk_tokens: int = 1024,
        threads: int | None = None,
        spin: str | None = None,
        tokenizer: WordPieceTokenizer | None = None,
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - dependency is pinned
            raise EmbeddingError("onnxruntime is not installed (pip install onnxruntime)") from exc
        path = Path(model_path)
        if not path.is_file():
            raise EmbeddingError(f"ONNX model file not found: {path}")
        self.model_id = model_id
        self.dim = dim
        self.max_seq_length = max_seq_length
        self.normalize = normalize
        self.chunk_size = max(1, chunk_size)
        self.chunk_tokens = max(1, chunk_tokens)
        self.tokenizer = tokenizer or bert_uncased_tokenizer()
        self.spin = spin or default_spin()
        if self.spin not in SPIN_MODES:
            raise EmbeddingError(f"spin must be one of {', '.join(SPIN_MODES)}, got {self.spin!r}")

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or default_threads()
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        allow_spinning, stop_after_call = SPIN_MODES[self.spin]
        opts.add_session_config_entry("session.intra_op.allow_spinning", allow_spinning)
        opts.add_session_config_entry("session.force_spinning_stop", stop_after_call)
        opts.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EmbeddingError(f"cannot load ONNX model {path}: {exc}") from exc
        inputs = [i.name for i in self._session.get_inputs()]
        self._wants_token_types = "token_type_ids" in inputs
        if "input_ids" not in inputs or "attention_mask" not in inputs:
            raise EmbeddingError(f"{path}: unexpected ONNX inputs {inputs}")
        outputs = self._session.get_outputs()
        self._output_name = output_name or outputs[0].name
        shape = next(o.shape for o in outputs if o.name == self._output_name)
        if isinstance(shape[-1], int) and shape[-1] != dim:
            raise EmbeddingError(f"{path}: output dimension {shape[-1]} != expected {dim}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r}, dim={self.dim})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        n = len(texts)
        out = np.empty((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"embed() texts must be str, got {type(t).__name__}")
        encoded = [self.tokenizer.encode(t, self.max_seq_length) for t in texts]
        # Runs of texts of like length, at most chunk_size texts or chunk_tokens padded pieces
        # (small runs are faster per text on this CPU), cut where padding costs more than a
        # run's fixed cost (chunking.py).
        lengths = [len(ids) for ids in encoded]
        for idx in plan_runs(lengths, max_texts=self.chunk_size, max_tokens=self.chunk_tokens):
            out[idx] = self._run([encoded[i] for i in idx])
        return out

    def _run(self, batch: list[list[int]]) -> np.ndarray:
        width = max(len(ids) for ids in batch)
        input_ids = np.full((len(batch), width), self.tokenizer.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if self._wants_token_types:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        try:
            (hidden,) = self._session.run([self._output_name], feeds)
        except Exception as exc:
            raise EmbeddingError(f"{self.model_id}: inference failed: {exc}") from exc
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        if self.normalize:
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled.astype(np.float32, copy=False)
