"""The lexical read model (``LexicalProjection``): BM25 and the keyword channel; how it works: docs/lexical.md."""

from memstream.projections.lexical.projection import LexicalProjection

__all__ = ["LexicalProjection"]
