"""Framework adapters over the typed client, installed as ``memstream.integrations``
(docs/integrations.md): a LangGraph store and an OpenAI Agents SDK session."""
