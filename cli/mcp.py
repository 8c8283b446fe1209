"""`vllm-tune mcp`: serve the tools, knowledge resources and prompts over MCP."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("mcp", help="run the MCP server (stdio by default)")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio for a local client; http for streamable HTTP")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (loopback by default)")
    p.add_argument("--port", type=int, default=8765, help="HTTP port")
    p.add_argument("--allowed-host", action="append", default=[], metavar="HOST[:PORT]",
                   help="a Host header clients may use (repeatable), e.g. the name behind a reverse proxy; "
                        "a bind-all --host already accepts this machine's names and addresses")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    # stdout carries the protocol on stdio: every log line must go to stderr.
    logging.basicConfig(stream=sys.stderr, level=os.environ.get("VLLM_TUNE_LOG_LEVEL", "WARNING"))
    from vllm_tune.server.app import build_server
    from vllm_tune.tools.kb import load_knowledge

    load_knowledge()  # fail fast, with the file and entry named, before a client connects
    mcp = build_server()
    if args.transport == "stdio":
        mcp.run("stdio")
        return 0
    from vllm_tune.server.http import run_http

    run_http(mcp, args.host, args.port, os.environ.get("VLLM_TUNE_MCP_TOKEN") or None, args.allowed_host)
    return 0
