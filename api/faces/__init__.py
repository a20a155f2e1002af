"""Faces: HTTP, MCP and the audit page, translating wire formats into tool calls."""
