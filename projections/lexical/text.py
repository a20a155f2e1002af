"""Text analysis: normalisation, BM25 tokens (stemmed; CJK bigrams), keyword terms and words."""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

import snowballstemmer

# Scripts written without spaces between words that the bigram rule covers.
_CJK = (
    "\u3005-\u3007"  # 々 〆 〇
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana (with ー)
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3130-\u318f"  # Hangul Compatibility Jamo
    "\ua960-\ua97f"  # Hangul Jamo Extended-A
    "\uac00-\ud7af"  # Hangul Syllables
    "\ud7b0-\ud7ff"  # Hangul Jamo Extended-B
    "\U00020000-\U0003134f"  # CJK Extensions B-G and the compatibility supplement
)


def _mark_class() -> str:
    """Combining marks (categories M*) as a regex class body.

    Python's ``\\w`` leaves them out, which would cut Devanagari, Thai, Bengali... words at
    every vowel sign. Marks outside the first two planes are only the variation selectors
    supplement, added as one range; scanning 128k code points costs ~15 ms once at import.
    """
    ranges: list[tuple[int, int]] = []
    for cp in range(0x20000):
        if unicodedata.category(chr(cp))[0] == "M":
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    ranges.append((0xE0100, 0xE01EF))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


_MARKS = _mark_class()
# A chunk: letters, digits, underscore and marks; CJK and underscores are split inside it.
_CHUNK = re.compile(f"[\\w{_MARKS}]+")
_CJK_OR_WORD = re.compile(f"([{_CJK}]+)|[^{_CJK}_]+")
_CJK_CHAR = re.compile(f"[{_CJK}]")
_ASCII_WORD = re.compile("[a-z0-9]+")  # the same rule for normalised ASCII text, 4x faster
# What a keyword term loses at its edges (CPersona strips the same set from its FTS phrases).
KEYWORD_EDGE_PUNCT = "\"'`.,;:!?()[]{}<>"
# Non-CJK keyword terms shorter than this match too much to mean anything (a, e, 1).
KEYWORD_MIN_CHARS = 2
# A long query (a pasted paragraph) contributes only its longest distinct terms.
KEYWORD_MAX_TERMS = 12

assert sys.maxunicode >= 0x10FFFF


def is_cjk(ch: str) -> bool:
    """Whether a character is one of the scripts cut into bigrams (Han, kana, Hangul)."""
    return _CJK_CHAR.match(ch) is not None


def normalize(text: str) -> str:
    """NFKC + casefold (ASCII fast path: lower)."""
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def _cjk_grams(run: str, out: list[str]) -> None:
    if len(run) == 1:
        out.append(run)
    else:
        out.extend(run[i : i + 2] for i in range(len(run) - 1))


def tokens_of_normalized(norm: str) -> list[str]:
    """BM25 tokens of already-normalised text, in text order, with repeats (stemmed)."""
    return [stem(t) for t in _split(norm)]


def _split(norm: str) -> list[str]:
    if norm.isascii():
        return _ASCII_WORD.findall(norm)
    out: list[str] = []
    for chunk in _CHUNK.findall(norm):
        if chunk.isascii():
            if "_" in chunk:
                out.extend(p for p in chunk.split("_") if p)
            else:
                out.append(chunk)
            continue
        for m in _CJK_OR_WORD.finditer(chunk):
            run = m.group(1)
            if run is None:
                out.append(m.group(0))
            else:
                _cjk_grams(run, out)
    return out


_STEMMER = snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=200_000)
def stem(token: str) -> str:
    """English (Snowball) stem of an ASCII word, so "crowed" meets "crow"; CJK bigrams,
    numbers and identifiers with digits are left as they are."""
    if len(token) <= 3 or not token.isalpha() or not token.isascii():
        return token
    result: str = _STEMMER.stemWord(token)
    return result


def tokens(text: str) -> list[str]:
    """BM25 tokens of raw text (stemmed)."""
    return tokens_of_normalized(normalize(text))


def query_tokens(text: str) -> list[str]:
    """Distinct BM25 tokens of a query, first occurrence order (a repeated word counts once)."""
    return list(dict.fromkeys(tokens(text)))


def words(text: str) -> list[str]:
    """Distinct whitespace-separated words of the normalised text (the keyword vocabulary)."""
    return list(dict.fromkeys(normalize(text).split()))


def keyword_terms(query: str) -> list[str]:
    """Keyword-channel terms: normalised, split on whitespace, edge punctuation stripped, distinct.

    A term shorter than ``KEYWORD_MIN_CHARS`` is dropped unless it holds a CJK character (one
    Han character is a word); past ``KEYWORD_MAX_TERMS`` terms, the longest are kept."""
    out: list[str] = []
    for raw in normalize(query).split():
        t = raw.strip(KEYWORD_EDGE_PUNCT)
        if not t:
            continue
        if len(t) < KEYWORD_MIN_CHARS and not _CJK_CHAR.search(t):
            continue
        out.append(t)
    terms = list(dict.fromkeys(out))
    if len(terms) > KEYWORD_MAX_TERMS:  # the longest are the most specific (ids, hashes, names)
        keep = set(sorted(range(len(terms)), key=lambda i: (-len(terms[i]), i))[:KEYWORD_MAX_TERMS])
        terms = [t for i, t in enumerate(terms) if i in keep]
    return terms
