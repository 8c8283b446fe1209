"""What a tuning session may store and hand to the servers it starts.

A session file is plain JSON that the CLI prints and MCP returns, so it must never hold a secret: a command
that carries one (--api-key, --hf-token VALUE, credentials in a URL, a secret-looking NAME=value prefix) is
refused, and the operator exports the secret instead; `vllm serve` reads VLLM_API_KEY itself
(vllm/entrypoints/serve/middleware/register.py, vLLM 0.32) and huggingface_hub reads HF_TOKEN, and the
servers the loop starts inherit vllm-tune's environment, as the benchmark client does.

The session env reaches the server process, so it is held to variables that tune vLLM and its runtime
(ALLOWED_ENV_PREFIXES); anything that decides which program or library runs (PATH, LD_*, PYTHON*, the
launcher's own VLLM_TUNE_*) is refused, and `vllm` itself is resolved from vllm-tune's own environment.
"""

from __future__ import annotations

import re
import shlex

from vllm_tune.tools.errors import BadInputError

# The one list of what a session env may set: vLLM, accelerator libraries, threading, the hub and torch.
ALLOWED_ENV_PREFIXES = (
    "VLLM_", "CUDA_", "NCCL_", "NVSHMEM_", "NVIDIA_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "GLOO_", "UCX_",
    "HIP_", "ROCM_", "HSA_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "OMP_", "KMP_", "MKL_", "TORCH_",
    "PYTORCH_", "TORCHINDUCTOR_", "TRITON_",
)
ALLOWED_ENV_NAMES = frozenset({"MASTER_ADDR", "MASTER_PORT"})
# Inside an allowed prefix but still refused: the launcher's own settings would let a session pick the
# program it runs (VLLM_TUNE_VLLM_CMD) or where results go.
REFUSED_ENV_PREFIXES = ("VLLM_TUNE_",)
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
SECRET_FLAGS = {"--api-key": "VLLM_API_KEY", "--hf-token": "HF_TOKEN"}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
# userinfo in a URL (https://user:pass@host, https://TOKEN@host) or a credential-like query parameter
_URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s@?#]+@")
_URL_TOKEN = re.compile(r"[?&](?:access_token|token|api[_-]?key|key|secret|password|passwd|auth|sig|signature|"
                        r"x-amz-signature|x-amz-credential|x-amz-security-token)=", re.IGNORECASE)


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def check_env_name(name: str) -> None:
    """One-line BadInputError unless `name` may be set for a server the loop starts."""
    if not _ENV_NAME.fullmatch(name):
        raise BadInputError(f"env {name!r} is not a variable name")
    if looks_secret(name):
        raise BadInputError(f"env {name} looks like a secret: the session file would keep it; export it in the "
                            "environment vllm-tune runs in, which the servers it starts inherit")
    upper = name.upper()
    allowed = (upper in ALLOWED_ENV_NAMES or upper.startswith(ALLOWED_ENV_PREFIXES)) \
        and not upper.startswith(REFUSED_ENV_PREFIXES)
    if not allowed:
        raise BadInputError(f"env {name} is not allowed for a tuning server: only vLLM, accelerator, threading, "
                            "hub and torch variables are (VLLM_*, CUDA_*, NCCL_*, HF_*, OMP_*, TORCH_*, ...); "
                            "loader, interpreter and path variables (PATH, LD_*, PYTHON*) and VLLM_TUNE_* "
                            "are refused because they choose what program runs")


def check_env(env: dict[str, str]) -> None:
    for name in env:
        check_env_name(name)


def _secret_flag(word: str) -> str | None:
    name = word.split("=", 1)[0].replace("_", "-")
    return name if name in SECRET_FLAGS else None


def check_command(command: str) -> None:
    """One-line BadInputError when `command` carries a secret or an env prefix a session may not set.

    The message names what was found and how to pass it instead, never the value."""
    try:
        words = shlex.split(command.replace("\\\n", " "))
    except ValueError as exc:
        raise BadInputError(f"cannot split the command: {exc}") from None
    i = 0
    while i < len(words) and (m := _ASSIGNMENT.fullmatch(words[i])):
        check_env_name(m.group(1))
        i += 1
    for k, word in enumerate(words):
        flag = _secret_flag(word)
        if flag is not None:
            attached = "=" in word
            following = k + 1 < len(words) and not words[k + 1].startswith("-")
            if attached or following or flag == "--api-key":
                env = SECRET_FLAGS[flag]
                raise BadInputError(
                    f"the command carries a secret in {flag}: a tuning session stores and shows its commands, "
                    f"so remove {flag} and its value and export {env} in the environment vllm-tune runs in "
                    f"(vllm serve reads {env} itself, and the servers the loop starts inherit it)")
        if _URL_USERINFO.search(word) or _URL_TOKEN.search(word):
            raise BadInputError("a URL in the command carries credentials (user:password@ or a token parameter): "
                                "a tuning session stores and shows its commands; pass them through the "
                                "environment instead")
