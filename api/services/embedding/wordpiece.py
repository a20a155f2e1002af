"""Pure-Python BERT (uncased) WordPiece tokenizer, giving the ids of Hugging Face ``tokenizers``
without depending on it (it cannot share the venv with faust-streaming, and an offline service
needs no hub client). See docs/embedding.md, "How the default model runs".
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from pathlib import Path

__all__ = ["WordPieceTokenizer"]

_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),  # sic: HF tokenizers' range (BERT's is 0x2B820); we match HF
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


@lru_cache(maxsize=8192)
def _char_class(ch: str) -> int:
    """0 keep, 1 drop, 2 whitespace, 3 CJK (isolate), 4 punctuation (isolate)."""
    if ch in "\t\n\r":
        return 2
    cp = ord(ch)
    cat = unicodedata.category(ch)
    # HF drops control/format/private-use/surrogate chars but keeps unassigned ones (Cn)
    if cp == 0 or cp == 0xFFFD or (cat[0] == "C" and cat != "Cn"):
        return 1
    if ch.isspace():
        return 2
    if _is_cjk(cp):
        return 3
    if _is_punct(ch):
        return 4
    return 0


class WordPieceTokenizer:
    """Thread-safe (stateless apart from an LRU cache of word → ids)."""

    def __init__(self, vocab_path: str | Path, *, max_input_chars_per_word: int = 100) -> None:
        with open(vocab_path, encoding="utf-8") as fh:
            tokens = [line.rstrip("\n") for line in fh]
        self.vocab: dict[str, int] = {tok: i for i, tok in enumerate(tokens)}
        if len(self.vocab) != len(tokens):
            raise ValueError(f"{vocab_path}: duplicate tokens in vocabulary")
        try:
            self.cls_id = self.vocab["[CLS]"]
            self.sep_id = self.vocab["[SEP]"]
            self.unk_id = self.vocab["[UNK]"]
            self.pad_id = self.vocab["[PAD]"]
        except KeyError as exc:  # pragma: no cover - broken data file
            raise ValueError(f"{vocab_path}: missing special token {exc}") from None
        self.max_input_chars_per_word = max_input_chars_per_word
        self._max_token_len = max(len(t) for t in tokens)
        self._word_ids = lru_cache(maxsize=1 << 16)(self._wordpiece)

    # -- normalisation + pre-tokenisation -------------------------------------------------------
    @staticmethod
    def _normalise(text: str) -> str:
        out: list[str] = []
        for ch in text:
            cls = _char_class(ch)
            if cls == 0:
                out.append(ch)
            elif cls == 2:
                out.append(" ")
            elif cls >= 3:
                if cls == 3:  # CJK ideographs are padded by the normaliser
                    out.append(" ")
                    out.append(ch)
                    out.append(" ")
                else:
                    out.append(ch)
        s = "".join(out)
        if not s.isascii():
            # strip accents (NFD, drop Mn), then lowercase char by char (no final-sigma rule)
            s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
            return "".join(c.lower() for c in s)
        return s.lower()

    @staticmethod
    def _split(text: str) -> list[str]:
        words: list[str] = []
        for chunk in text.split():
            if chunk.isalnum():
                words.append(chunk)
                continue
            start = 0
            for i, ch in enumerate(chunk):
                if _is_punct(ch):
                    if start < i:
                        words.append(chunk[start:i])
                    words.append(ch)
                    start = i + 1
            if start < len(chunk):
                words.append(chunk[start:])
        return words

    def _wordpiece(self, word: str) -> tuple[int, ...]:
        if len(word) > self.max_input_chars_per_word:
            return (self.unk_id,)
        vocab = self.vocab
        ids: list[int] = []
        start, n = 0, len(word)
        while start < n:
            end = min(n, start + self._max_token_len)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return (self.unk_id,)
            ids.append(found)
            start = end
        return tuple(ids)

    # -- public --------------------------------------------------------------------------------
    def tokenize_words(self, text: str) -> list[str]:
        """Normalised, pre-tokenised words (before WordPiece)."""
        return self._split(self._normalise(text))

    def encode(self, text: str, max_length: int | None = None) -> list[int]:
        """``[CLS] ids… [SEP]``, truncated so the whole sequence fits ``max_length``."""
        ids = [self.cls_id]
        limit = None if max_length is None else max_length - 1
        for word in self.tokenize_words(text):
            ids.extend(self._word_ids(word))
            if limit is not None and len(ids) >= limit:
                del ids[limit:]
                break
        ids.append(self.sep_id)
        return ids
