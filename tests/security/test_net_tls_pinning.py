"""A pinned connection still verifies TLS against the name in the URL (SNI and certificate), not the address.

The certificate below is issued for vllm.test only; the DNS stub points vllm.test at 127.0.0.1. The
request succeeds only if the handshake sends SNI vllm.test and checks the certificate against that name,
and the same certificate is refused when the URL names another host that resolves to the same address.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from netfakes import Net

from vllm_tune.tools.net import TargetPolicy
from vllm_tune.tools.net.connect import GuardedTransport


@pytest.fixture
def tls_server(tmp_path: Path) -> Any:
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=vllm.test", "-addext", "subjectAltName=DNS:vllm.test"],
                   check=True, capture_output=True, timeout=60)
    names: list[str | None] = []

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = self.headers.get("host", "").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    ctx.sni_callback = lambda sock, name, _ctx: names.append(name)  # type: ignore[assignment,misc]
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], cert, names
    server.shutdown()
    server.server_close()


def test_pinned_https_keeps_sni_and_certificate_name(net: Net, tls_server: Any) -> None:
    port, cert, names = tls_server
    net.rebind("vllm.test", ["127.0.0.1"], ["169.254.169.254"])
    net.resolve("other.test", "127.0.0.1")
    trust = ssl.create_default_context(cafile=str(cert))
    transport = GuardedTransport(TargetPolicy.of([]), max_bytes=1 << 20, deadline_s=10, verify=trust)
    with httpx.Client(transport=transport, trust_env=False) as client:
        response = client.get(f"https://vllm.test:{port}/")
        assert response.status_code == 200 and response.text == f"vllm.test:{port}"
        assert names[-1] == "vllm.test"
        with pytest.raises(httpx.ConnectError, match=r"certificate|hostname"):
            client.get(f"https://other.test:{port}/")
    assert not net.attempted("169.254.169.254")
