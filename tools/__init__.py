"""Domain logic of vllm-tune: plain typed functions that know nothing of MCP or the CLI."""
