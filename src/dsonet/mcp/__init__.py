"""dsonet as an MCP server (`dso mcp`): search, add, record_outcome and stats tools over a library or a node."""
