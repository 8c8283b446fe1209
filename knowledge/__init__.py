"""The cited knowledge base, kept as YAML data next to this file (see knowledge/README.md)."""

from pathlib import Path

ENTRIES_DIR = Path(__file__).parent / "entries"
"""Folder of YAML files; each holds a list of knowledge entries."""

SAMPLES_DIR = Path(__file__).parent / "samples"
"""Real captures from a vLLM server, shipped so `vllm-tune demo` works offline (see samples/README.md)."""

SERVE_FLAGS_DIR = Path(__file__).parent / "serve_flags"
"""Option tables of `vllm serve`, one per release, built from vLLM's own parser (scripts/build_serve_flags.py)."""
