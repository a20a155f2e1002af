"""The CONTRACTS.md suites, run through the faces (HTTP and MCP)."""
