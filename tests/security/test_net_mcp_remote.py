"""Remote MCP over HTTP works for a real client on a non-loopback address (issue 18 item 5).

`VLLM_TUNE_MCP_TOKEN=t vllm-tune mcp --transport http --host 0.0.0.0` answered 421 to every real client
(allowed hosts became 0.0.0.0:PORT). The server and the SDK's streamable-HTTP client run inside a network
namespace made for the test (`unshare -rn`), where a veth interface holds 10.77.0.1: the traffic never
leaves the namespace, and the address is not loopback.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ADDRESS = "10.77.0.1"

CLIENT = textwrap.dedent('''
    import json, os, socket, subprocess, sys, time
    import anyio, httpx, httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    address, cli = sys.argv[1], sys.argv[2]
    probe = socket.socket(); probe.bind((address, 0)); port = probe.getsockname()[1]; probe.close()
    env = {**os.environ, "VLLM_TUNE_MCP_TOKEN": "ns-t0ken"}
    server = subprocess.Popen([cli, "mcp", "--transport", "http", "--host", "0.0.0.0", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection((address, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        url = f"http://{address}:{port}/mcp"

        async def main():
            # The scheme in lower case: RFC 7235 makes it case-insensitive.
            http = httpx2.AsyncClient(headers={"Authorization": "bearer ns-t0ken"})
            async with Client(streamable_http_client(url, http_client=http)) as client:
                out["tools"] = sorted(t.name for t in (await client.list_tools()).tools)

        anyio.run(main)
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
        hdr = {"Accept": "application/json, text/event-stream", "Authorization": "Bearer ns-t0ken"}
        out["wrong_host"] = httpx.post(url, json=init, headers={**hdr, "Host": f"evil.example:{port}"},
                                       trust_env=False).status_code
        out["no_token"] = httpx.post(url, json=init, headers={"Accept": hdr["Accept"]}, trust_env=False).status_code
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        out["server_stderr"] = server.stderr.read().decode(errors="replace")[-2000:]
    print(json.dumps(out))
''')

SETUP = (f"ip link set lo up && ip link add vt0 type veth peer name vt1 && ip addr add {ADDRESS}/24 dev vt0 "
         "&& ip link set vt0 up && ip link set vt1 up")


def _namespaces_work() -> bool:
    if not shutil.which("unshare") or not shutil.which("ip"):
        return False
    probe = subprocess.run(["unshare", "-rn", "sh", "-c", SETUP], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def test_real_client_reaches_a_bind_all_server_on_a_non_loopback_address(tmp_path: Path) -> None:
    if not _namespaces_work():
        pytest.skip("cannot create a network namespace with a veth interface here (unshare -rn / ip link)")
    cli = Path(sys.executable).with_name("vllm-tune")
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    proc = subprocess.run(["unshare", "-rn", "sh", "-c", f'{SETUP} && exec "$0" "$@"', sys.executable, str(script),
                           ADDRESS, str(cli)], capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in out, out
    assert "diagnose_metrics" in out["tools"] and "run_benchmark" in out["tools"]
    assert out["wrong_host"] == 421  # DNS-rebinding protection still on
    assert out["no_token"] == 401
