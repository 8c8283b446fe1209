"""Shared pytest configuration."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True, scope="session")
def _file_roots_cover_test_folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Over MCP only files under the allowed roots are read (tools/files.py); the tests keep their files in
    pytest's temporary folders, so those are allowed next to the working directory, for in-process servers and
    the subprocess servers that inherit the environment. tests/security/ sets its own roots."""
    before = os.environ.get("VLLM_TUNE_FILE_ROOTS")
    roots = [str(Path.cwd()), str(tmp_path_factory.getbasetemp())]
    os.environ["VLLM_TUNE_FILE_ROOTS"] = os.pathsep.join(roots)
    yield
    if before is None:
        os.environ.pop("VLLM_TUNE_FILE_ROOTS", None)
    else:
        os.environ["VLLM_TUNE_FILE_ROOTS"] = before


@pytest.fixture(autouse=True)
def _surface_is_mcp_unless_a_test_says_otherwise() -> Iterator[None]:
    """The CLI's main() sets the wording surface for its process (tools/surface.py); in-process CLI tests must
    not leave it set for the tests that follow, which call the domain functions as the MCP server does."""
    from vllm_tune.tools import surface

    surface.use("mcp")
    yield
    surface.use("mcp")
