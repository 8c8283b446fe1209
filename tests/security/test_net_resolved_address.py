"""A listed name is trusted only for ordinary addresses, and connections go to the address that was checked.

Issue 18 item 2: with VLLM_TUNE_ALLOWED_TARGETS=vllm.internal and vllm.internal resolving to
169.254.169.254, diagnose (url, prometheus_url) and bench connected there with the API key; and the check
resolved once while httpx resolved again at connect time (a rebinding window).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from netfakes import Net, Served, reply

from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark
from vllm_tune.tools.bench.records import RequestRecord
from vllm_tune.tools.bench.transport import StreamingPool
from vllm_tune.tools.diagnose.api import DiagnoseInput, diagnose_metrics
from vllm_tune.tools.errors import TargetNotAllowedError
from vllm_tune.tools.net import SecretRedactor, TargetPolicy, fetch_text, http_client

METADATA = "169.254.169.254"


@pytest.mark.parametrize("address", [METADATA, "fd00:ec2::254", "::ffff:169.254.169.254", "169.254.7.7", "fe80::1",
                                     "0.0.0.0", "100.100.100.200"])
def test_listed_name_does_not_vouch_for_metadata_or_link_local(net: Net, address: str) -> None:
    net.resolve("vllm.internal", address)
    with pytest.raises(TargetNotAllowedError, match="lists it by address"):
        TargetPolicy.of(["vllm.internal"]).check("http://vllm.internal:8000")


def test_listed_name_with_one_bad_address_among_good_ones_is_refused(net: Net) -> None:
    net.resolve("vllm.internal", "10.0.0.5", METADATA)
    with pytest.raises(TargetNotAllowedError, match=METADATA):
        TargetPolicy.of(["vllm.internal:8000"]).check("http://vllm.internal:8000")


def test_listed_name_keeps_working_for_ordinary_addresses(net: Net) -> None:
    net.resolve("vllm.internal", "10.0.0.5", "fd12::5")
    assert TargetPolicy.of(["vllm.internal"]).check("vllm.internal:8000") == "http://vllm.internal:8000"


def test_metadata_allowed_only_when_listed_by_address(net: Net) -> None:
    net.resolve("meta.internal", METADATA)
    assert TargetPolicy.of([METADATA]).check(f"http://{METADATA}")
    assert TargetPolicy.of(["169.254.0.0/16"]).check("http://meta.internal")
    with pytest.raises(TargetNotAllowedError):
        TargetPolicy.of([]).check(f"http://{METADATA}")


def test_sync_client_refuses_before_connecting_and_sends_no_key(net: Net, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-must-not-leave")
    net.resolve("vllm.internal", METADATA)
    with http_client(TargetPolicy.of(["vllm.internal"])) as client, pytest.raises(TargetNotAllowedError):
        fetch_text(client, "http://vllm.internal:8000/metrics")
    assert not net.attempted(METADATA)


def test_a_name_that_rebinds_after_the_check_is_not_followed(net: Net, serve: Any) -> None:
    """First answer loopback (passes), later answers metadata: the connection uses the checked answer."""
    served: Served = serve(lambda req: reply(req, 200, b"vllm:num_requests_running 0\n", "text/plain"))
    net.rebind("flip.test", ["127.0.0.1"], [METADATA])
    with http_client(TargetPolicy.of([])) as client:
        text = fetch_text(client, f"http://flip.test:{served.port}/metrics")
    assert "num_requests_running" in text
    assert not net.attempted(METADATA)
    assert served.seen[0]["host"] == f"flip.test:{served.port}"  # the Host header keeps the name


def test_async_client_is_pinned_too(net: Net, serve: Any) -> None:
    served: Served = serve(lambda req: reply(req, 200, b'{"data": []}'))
    net.rebind("flip.test", ["127.0.0.1"], [METADATA])

    from vllm_tune.tools.net.connect import async_guarded_client

    async def go() -> int:
        async with async_guarded_client(TargetPolicy.of([])) as client:
            return (await client.get(f"http://flip.test:{served.port}/v1/models")).status_code

    assert asyncio.run(go()) == 200
    assert not net.attempted(METADATA)


def test_diagnose_url_and_prometheus_url_refused(net: Net) -> None:
    net.resolve("vllm.internal", METADATA)
    policy = TargetPolicy.of(["vllm.internal"])
    for request in (DiagnoseInput(url="http://vllm.internal:8000", window_s=0),
                    DiagnoseInput(prometheus_url="http://vllm.internal:9090", window_s=60)):
        with pytest.raises(TargetNotAllowedError):
            asyncio.run(diagnose_metrics(request, policy=policy))
    assert not net.attempted(METADATA)


def test_benchmark_refused_before_any_connection(net: Net, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-must-not-leave")
    net.resolve("vllm.internal", METADATA)
    req = RunBenchmarkInput(url="http://vllm.internal:8000", concurrency=1, num_prompts=1, confirm=True,
                            save_result=str(tmp_path))
    with pytest.raises(TargetNotAllowedError):
        asyncio.run(run_benchmark(req, policy=TargetPolicy.of(["vllm.internal"])))
    assert not net.attempted(METADATA)


def test_benchmark_control_client_rechecks_a_rebinding_name(net: Net, tmp_path: Any) -> None:
    """The check (and the loopback test) pass on the first answers; the control client's own lookup sees
    metadata and stops before connecting."""
    net.rebind("flip.test", ["127.0.0.1"], [METADATA], first_n=2)
    req = RunBenchmarkInput(url="http://flip.test:8000", concurrency=1, num_prompts=1, save_result=str(tmp_path))
    with pytest.raises(TargetNotAllowedError, match="by address"):
        asyncio.run(run_benchmark(req, policy=TargetPolicy.of([])))
    assert len(net.lookups) == 3
    assert not net.attempted(METADATA)


def test_load_pool_connects_only_to_checked_addresses(net: Net) -> None:
    net.resolve("vllm.internal", METADATA)
    rec = RequestRecord(0, 0.0)

    async def go() -> None:
        pool = StreamingPool("http://vllm.internal:8000", max_connections=1, timeout_s=5, api_key="sk-x",
                             redact=SecretRedactor(), policy=TargetPolicy.of(["vllm.internal"]))
        await pool.send(pool.request_bytes("/v1/completions", b"{}"), rec, chat=False)
        pool.close()

    asyncio.run(go())
    assert not rec.success
    assert METADATA in (rec.error or "")
    assert not net.attempted(METADATA)
