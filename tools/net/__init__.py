"""Network access under the operator's control: target allowlist, API keys, secret redaction."""

from vllm_tune.tools.net.http import SecretRedactor, api_key, fetch_text, http_client
from vllm_tune.tools.net.targets import TargetPolicy, normalize_base_url
from vllm_tune.tools.net.vllm_probe import ServedModel, VllmServerInfo, probe_vllm

__all__ = [
    "SecretRedactor",
    "ServedModel",
    "TargetPolicy",
    "VllmServerInfo",
    "api_key",
    "fetch_text",
    "http_client",
    "normalize_base_url",
    "probe_vllm",
]
