"""Session fixtures that start real components: vLLM CPU servers, Prometheus.

Components come from `python -m tests.support.provision`; when one is missing the fixture fails with
a message saying to run it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.cpu_split import CoreSplit
from support.prometheus import PrometheusServer, start_prometheus
from support.tiny_models import TinyModels, ensure_tiny_models
from support.vllm_env import ComponentMissingError, ensure_vllm_python
from support.vllm_server import VllmFactory, VllmServer, start_vllm

MAX_FACTORY_SERVERS = 3


def _require(fn: Callable[[], object]) -> None:
    try:
        fn()
    except ComponentMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def tiny_models() -> TinyModels:
    _require(lambda: ensure_vllm_python(install=False))
    try:
        return ensure_tiny_models(build=False)
    except ComponentMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def server_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-logs")


@pytest.fixture(scope="session")
def vllm_server(tiny_models: TinyModels, server_log_dir: Path) -> Iterator[VllmServer]:
    with start_vllm(tiny_models.llama, log_dir=server_log_dir) as server:
        yield server


@pytest.fixture(scope="session")
def vllm_moe_server(tiny_models: TinyModels, server_log_dir: Path) -> Iterator[VllmServer]:
    with start_vllm(tiny_models.mixtral, log_dir=server_log_dir) as server:
        yield server


@pytest.fixture(scope="session")
def prometheus(vllm_server: VllmServer) -> Iterator[PrometheusServer]:
    try:
        server = start_prometheus([vllm_server.url], scrape_interval_s=1)
    except ComponentMissingError as exc:
        pytest.fail(str(exc), pytrace=False)
    with server:
        yield server


@pytest.fixture(scope="session")
def vllm_server_factory(tiny_models: TinyModels, server_log_dir: Path) -> Iterator[VllmFactory]:
    """`factory(args=[...], env={...}, model=path, split=CoreSplit)` -> a server, cached per (model, args, env,
    split) for the session; with a split its engine runs on cores of its own (support/cpu_split.py).

    At most MAX_FACTORY_SERVERS stay alive; the least recently used one is stopped to make room."""
    cache: OrderedDict[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...], CoreSplit | None], VllmServer] = \
        OrderedDict()

    def factory(
        args: list[str] | None = None, env: dict[str, str] | None = None, model: Path | None = None,
        split: CoreSplit | None = None,
    ) -> VllmServer:
        path = model or tiny_models.llama
        key = (str(path), tuple(args or []), tuple(sorted((env or {}).items())), split)
        server = cache.get(key)
        if server is not None and server.alive():
            cache.move_to_end(key)
            return server
        if server is not None:
            server.stop()
            del cache[key]
        while len(cache) >= MAX_FACTORY_SERVERS:
            _, oldest = cache.popitem(last=False)
            oldest.stop()
        server = start_vllm(path, list(args or []), dict(env or {}), log_dir=server_log_dir, split=split)
        cache[key] = server
        return server

    try:
        yield factory
    finally:
        for server in cache.values():
            server.stop()
