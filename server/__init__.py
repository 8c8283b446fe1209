"""MCP wiring for vllm-tune: registers the domain tools, knowledge resources and prompts."""
