"""LangGraph: ``MemstreamStore``, a ``BaseStore`` over memstream (docs/integrations.md).
Needs the ``langgraph`` extra: ``pip install 'memstream[langgraph]'``."""

from .store import MemstreamStore

__all__ = ["MemstreamStore"]
