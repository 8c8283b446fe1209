"""The `vllm-tune` command line: one sub-command per tool, sharing the tools' pydantic models."""
