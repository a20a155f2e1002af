"""OpenAI Agents SDK: ``MemstreamSession``, a ``Session`` over memstream (docs/integrations.md).
Needs the ``openai-agents`` extra: ``pip install 'memstream[openai-agents]'``."""

from .session import MemstreamSession

__all__ = ["MemstreamSession"]
