"""One typed settings object, read from ``MEMSTREAM_*`` environment variables.

Every knob has one name and one default here, so the CLI, the servers and the tests agree on
what a deployment is running with. Knob names follow CPersona's with the ``MEMSTREAM_``
prefix where the two share a meaning.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from memstream.projections.catalog import ReadModelOptions


def default_data_dir() -> Path:
    return Path.home() / ".local" / "share" / "memstream"


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    data_dir: Path = Field(default_factory=default_data_dir)
    partitions: int = Field(default=16, ge=1, le=4096)
    # FULL: an acknowledged write survives power loss; NORMAL: it survives a process crash.
    sync: str = Field(default="FULL", pattern="^(FULL|NORMAL)$")
    # Content past this is cut and reported (truncated: true), as CPersona's 16000 cap is.
    max_content_chars: int = Field(default=16_000, ge=1)
    max_profile_chars: int = Field(default=2_000, ge=1)
    # Text past this is not cut but refused: it is a mistake or an attack, not a memory.
    max_input_chars: int = Field(default=1_000_000, ge=1)
    # Serialised metadata (and source) past this is refused, not cut.
    max_metadata_chars: int = Field(default=8_000, ge=0)
    snapshot_every: int = Field(default=100_000, ge=1)
    embedding_url: str | None = None
    embedder: str | None = None
    # Micro-batching (docs/embedding.md): concurrent embed requests share one model call of at
    # most this many texts; an idle model waits this long for company first (0: never waits).
    embed_batch_max: int = Field(default=64, ge=1, le=4096)
    embed_batch_wait_ms: float = Field(default=0.0, ge=0, le=100)
    # After a call with several callers, wait up to this many times its duration for them to
    # come back before the next call (0: never; never after a lone caller's call). On by
    # default since 8 clients' calls of 8 texts beat two groups' calls of 4 (docs/embedding.md,
    # "Spinning within a call").
    embed_batch_regroup: float = Field(default=1.0, ge=0, le=10)
    # ... and never longer than this: a caller comes back within the server's own turnaround,
    # whatever the model's speed, so a slow model's long call is no reason to wait longer.
    embed_batch_regroup_max_ms: float = Field(default=20.0, ge=0, le=1000)
    # Model calls that may run at once (a local ONNX model's intra-op threads become cores / N).
    embed_concurrent_calls: int = Field(default=1, ge=1, le=8)
    # How long a read waits for the projections to reach the caller's own write (R12).
    read_your_writes_timeout_s: float = Field(default=5.0, gt=0)
    acl_file: Path | None = None
    # Kafka mode: the shared secret routers present to workers (api/kafka/router/gate.py). When a worker
    # has one, it answers nothing that does not carry it, so only routers reach its tools.
    worker_token: SecretStr | None = None
    # Browser-origin protection (docs/security.md, "Browser origins"): Host names the HTTP API
    # answers besides the loopback ones, and origins allowed besides those hosts' own pages.
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    # ACL mode: how long an audit page login (a session cookie) lasts.
    audit_session_s: float = Field(default=3_600.0, gt=0, le=7 * 86_400)
    # The change feed (docs/feed.md): a keep-alive comment at least this often; events a
    # subscriber may fall behind before it is cut off; how long one send to a client that stopped
    # reading may wait before its stream is dropped.
    feed_keepalive_s: float = Field(default=15.0, gt=0, le=15)
    feed_buffer: int = Field(default=1_000, ge=1, le=1_000_000)
    feed_send_timeout_s: float = Field(default=30.0, gt=0)
    # The floor of the embedded feed's read interval: under a write storm one write to each
    # subscriber carries that moment's commits; the interval grows with the subscribers up to
    # 85 ms, and a floor above that is the interval (docs/feed.md, "Cost").
    feed_interval_s: float = Field(default=0.025, ge=0, le=1)

    # -- recall (CPersona's knobs, MEMSTREAM_ prefix) --------------------------------------
    recall_mode: Literal["rrf", "rsf", "cascade"] = "rrf"
    # Which retrievers run: all, or one of them alone (evaluation, diagnosis).
    recall_retrievers: Literal["all", "vector", "lexical"] = "all"
    max_memories: int = Field(default=10_000, ge=1)  # the vector scan window (a recency prior)
    vector_reach: int = Field(default=0, ge=0)  # > max_memories adds the far list (rrf/rsf)
    vector_far_limit: int = Field(default=0, ge=0)  # far rows that may vote (0: the limit)
    vector_min_similarity: float = Field(default=0.3, ge=-1, le=1)  # cascade's vector stage
    rrf_k: int = Field(default=60, ge=1)  # the rrf score's constant: the gate's scale, match_reason
    # rrf's order: each vote weighted by its retriever's evidence for the row (cosine; share of
    # the query's IDF mass), ``evidence / rank``. Off: classic ``1 / (rrf_k + rank)`` votes.
    rrf_evidence: bool = True
    # The lexical list's vote relative to the vector list's in rrf (docs/eval.md). With evidence
    # weighting the evidence does this job; 0.5 was the classic order's default.
    rrf_lexical_weight: float = Field(default=1.0, ge=0)
    # Adjacent-turn evidence under rrf: a row's evidence in each list plus this share of its
    # neighbour's (the previous/next memory in write order); 0 turns it off (docs/eval.md, "LoCoMo").
    recall_neighbour_weight: float = Field(default=0.25, ge=0, le=1)
    # Under evidence-weighted rrf with both retrievers, a turn whose speaker ("Name: text") the
    # query names has its order value raised by this share; 0 turns it off (docs/eval.md).
    recall_speaker_boost: float = Field(default=0.5, ge=0, le=4)
    # Under evidence-weighted rrf with both retrievers, a second stage reorders the candidates of
    # lists three times as deep with a learned linear model (api/query/recall/rerank.py); off:
    # the first stage's order over the usual depth (docs/eval.md, "Third pass").
    recall_rerank: Literal["learned", "off"] = "learned"
    confidence_enabled: bool = False
    confidence_ordering: Literal["fusion", "legacy"] = "fusion"
    episode_penalty_enabled: bool = False
    episode_decay_rate: float = Field(default=0.01, ge=0)
    episode_decay_floor: float = Field(default=0.5, ge=0, le=1)
    autocut_enabled: bool = True
    autocut_min_gap_ratio: float = Field(default=0.15, ge=0)
    autocut_min_results: int = Field(default=3, ge=1)
    recall_precision: Literal["strict", "balanced", "lenient"] = "balanced"
    recall_preview_chars: int = Field(default=500, ge=0)
    recall_excerpt_chars: int = Field(default=800, ge=0)

    # -- context packages, know/miss packets, standings (docs/context-packets.md) ----------
    # A memory not verified (written, or re-checked with verify_memory) within this window is stale.
    stale_after_s: float = Field(default=30 * 86_400, gt=0)
    # A scope holding fewer memories than this answers a packet with ``miss: sparse``.
    packet_min_pool: int = Field(default=3, ge=0)
    # The token budget of a context package when the call names none, and one summary line's cap.
    context_max_tokens: int = Field(default=2_000, ge=16)
    context_line_tokens: int = Field(default=48, ge=4)
    # check_contingent: carriers kept per value (more: the value is not judged), and memories
    # scanned when no refs are given (more: nothing is judged).
    contingent_max_carriers: int = Field(default=50, ge=1)
    contingent_max_scan: int = Field(default=100_000, ge=1)

    # -- Kafka mode ----------------------------------------------------------------------
    # A worker checkpoints a partition's read models after this many events (0: never), so a
    # worker that gains the partition folds only the tail (docs/kafka-operations.md).
    kafka_checkpoint_every: int = Field(default=100_000, ge=0)

    @field_validator("worker_token")
    @classmethod
    def _presentable(cls, token: SecretStr | None) -> SecretStr | None:
        """A header value sent on every forwarded call: printable ASCII, no surrounding space
        (a value written with ``echo`` ends in a newline). Never echoed in the error."""
        if token is None:
            return None
        raw = token.get_secret_value()
        if len(raw) < 16 or not raw.isascii() or not raw.isprintable() or raw != raw.strip() or " " in raw:
            raise ValueError("must be at least 16 printable ASCII characters without spaces")
        return token

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _host_names(cls, value: Any) -> Any:
        """Comma-separated (the environment) or a list: bare host names or IP addresses, no port."""
        return tuple(_host_name(entry) for entry in _entries(value)) if _is_list(value) else value

    @field_validator("allowed_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> Any:
        """Comma-separated (the environment) or a list: ``http(s)://host[:port]``, nothing more."""
        return tuple(_origin(entry) for entry in _entries(value)) if _is_list(value) else value

    @property
    def read_model_options(self) -> ReadModelOptions:
        """How this process builds its read models: vector graphs only when a recall can reach
        past the window (MEMSTREAM_VECTOR_REACH above MEMSTREAM_MAX_MEMORIES: a far list), the
        one search that uses them."""
        return ReadModelOptions(vector_graphs=self.vector_reach > self.max_memories)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "log.sqlite3"

    @property
    def snapshot_dir(self) -> Path:
        return self.data_dir / "snapshots"


def _is_list(value: Any) -> bool:
    return isinstance(value, (str, list, tuple))


def _entries(value: str | list[Any] | tuple[Any, ...]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return [item.strip() for item in items if item.strip()]


def _host_name(entry: str) -> str:
    """A host name or IP address as a Host header names it, lowercased, IPv6 without brackets."""
    host = entry.lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c in host for c in "/@*?#[] \t") or (host.count(":") == 1):
        raise ValueError(f"{entry!r} is not a host name or IP address (no scheme, port, path or wildcard)")
    return host


def _origin(entry: str) -> str:
    """``scheme://host[:port]`` lowercased, as a browser sends it in ``Origin``."""
    scheme, sep, rest = entry.lower().rstrip("/").partition("://")
    if not sep or scheme not in ("http", "https") or not rest or any(c in rest for c in "/@*?# \t"):
        raise ValueError(f"{entry!r} is not an origin (http://host[:port] or https://host[:port])")
    return f"{scheme}://{rest}"


_ENV = {
    "data_dir": "MEMSTREAM_DATA_DIR",
    "partitions": "MEMSTREAM_PARTITIONS",
    "sync": "MEMSTREAM_SYNC",
    "max_content_chars": "MEMSTREAM_MAX_CONTENT_LENGTH",
    "max_profile_chars": "MEMSTREAM_MAX_PROFILE_LENGTH",
    "max_input_chars": "MEMSTREAM_MAX_INPUT_CHARS",
    "max_metadata_chars": "MEMSTREAM_MAX_METADATA_CHARS",
    "snapshot_every": "MEMSTREAM_SNAPSHOT_EVERY",
    "embedding_url": "MEMSTREAM_EMBEDDING_URL",
    "embedder": "MEMSTREAM_EMBEDDER",
    "embed_batch_max": "MEMSTREAM_EMBED_BATCH_MAX",
    "embed_batch_wait_ms": "MEMSTREAM_EMBED_BATCH_WAIT_MS",
    "embed_batch_regroup": "MEMSTREAM_EMBED_BATCH_REGROUP",
    "embed_batch_regroup_max_ms": "MEMSTREAM_EMBED_BATCH_REGROUP_MAX_MS",
    "embed_concurrent_calls": "MEMSTREAM_EMBED_CONCURRENT_CALLS",
    "read_your_writes_timeout_s": "MEMSTREAM_READ_YOUR_WRITES_TIMEOUT",
    "acl_file": "MEMSTREAM_ACL_FILE",
    "worker_token": "MEMSTREAM_WORKER_TOKEN",
    "allowed_hosts": "MEMSTREAM_ALLOWED_HOSTS",
    "allowed_origins": "MEMSTREAM_ALLOWED_ORIGINS",
    "audit_session_s": "MEMSTREAM_AUDIT_SESSION_SECONDS",
    "feed_keepalive_s": "MEMSTREAM_FEED_KEEPALIVE_SECONDS",
    "feed_buffer": "MEMSTREAM_FEED_BUFFER",
    "feed_send_timeout_s": "MEMSTREAM_FEED_SEND_TIMEOUT_SECONDS",
    "feed_interval_s": "MEMSTREAM_FEED_INTERVAL_SECONDS",
    "recall_mode": "MEMSTREAM_RECALL_MODE",
    "recall_retrievers": "MEMSTREAM_RECALL_RETRIEVERS",
    "max_memories": "MEMSTREAM_MAX_MEMORIES",
    "vector_reach": "MEMSTREAM_VECTOR_REACH",
    "vector_far_limit": "MEMSTREAM_VECTOR_FAR_LIMIT",
    "vector_min_similarity": "MEMSTREAM_VECTOR_MIN_SIMILARITY",
    "rrf_k": "MEMSTREAM_RRF_K",
    "rrf_evidence": "MEMSTREAM_RRF_EVIDENCE",
    "rrf_lexical_weight": "MEMSTREAM_RRF_LEXICAL_WEIGHT",
    "recall_neighbour_weight": "MEMSTREAM_RECALL_NEIGHBOUR_WEIGHT",
    "recall_speaker_boost": "MEMSTREAM_RECALL_SPEAKER_BOOST",
    "recall_rerank": "MEMSTREAM_RECALL_RERANK",
    "confidence_enabled": "MEMSTREAM_CONFIDENCE_ENABLED",
    "confidence_ordering": "MEMSTREAM_CONFIDENCE_ORDERING",
    "episode_penalty_enabled": "MEMSTREAM_EPISODE_PENALTY_ENABLED",
    "episode_decay_rate": "MEMSTREAM_EPISODE_DECAY_RATE",
    "episode_decay_floor": "MEMSTREAM_EPISODE_DECAY_FLOOR",
    "autocut_enabled": "MEMSTREAM_AUTOCUT_ENABLED",
    "autocut_min_gap_ratio": "MEMSTREAM_AUTOCUT_MIN_GAP_RATIO",
    "autocut_min_results": "MEMSTREAM_AUTOCUT_MIN_RESULTS",
    "recall_precision": "MEMSTREAM_RECALL_PRECISION",
    "recall_preview_chars": "MEMSTREAM_RECALL_PREVIEW_CHARS",
    "recall_excerpt_chars": "MEMSTREAM_RECALL_EXCERPT_CHARS",
    "stale_after_s": "MEMSTREAM_STALE_AFTER_SECONDS",
    "packet_min_pool": "MEMSTREAM_PACKET_MIN_POOL",
    "context_max_tokens": "MEMSTREAM_CONTEXT_MAX_TOKENS",
    "context_line_tokens": "MEMSTREAM_CONTEXT_LINE_TOKENS",
    "contingent_max_carriers": "MEMSTREAM_CONTINGENT_MAX_CARRIERS",
    "contingent_max_scan": "MEMSTREAM_CONTINGENT_MAX_SCAN",
    "kafka_checkpoint_every": "MEMSTREAM_KAFKA_CHECKPOINT_EVERY",
}


class SettingsError(Exception):
    pass


def load_settings(env: dict[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from the environment, then explicit overrides; a bad value names its variable."""
    source = os.environ if env is None else env
    values: dict[str, Any] = {}
    for field, var in _ENV.items():
        raw = source.get(var)
        if raw not in (None, ""):
            values[field] = raw
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{_ENV.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in exc.errors())
        raise SettingsError(f"invalid settings: {problems}") from None
