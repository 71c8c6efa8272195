"""Loading the in-process judge's model: the libraries it needs, the weights placed on the
CPU or the GPU(s) (refused before minutes of loading when they would spill to the CPU),
and Outlines' view of the model with its llguidance grammar backend.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radmatch_audit.core.control_strings import tokenizer_tokens
from radmatch_audit.files.paths import install_command
from radmatch_audit.judges.base import JudgeUnavailable

THREADS_ENV = "RADMATCH_TORCH_THREADS"
# `cache=` / `.cache` (formerly `past_key_values`) appeared in transformers 5.24.0
TRANSFORMERS_MIN = (5, 24)
GPU_HEADROOM = 0.9  # of the free GPU memory, for the weights (activations and cache need the rest)


@dataclass
class LoadedModel:
    """A model ready for grammar-constrained generation, and what its caches look like."""

    device: str
    tokenizer: Any
    hf_model: Any
    outlines_model: Any  # Outlines' wrapper: its tokenizer gives the ids the model is fed
    grammar_backend: Any  # llguidance, through Outlines
    control_tokens: tuple[str, ...]  # every special token of the tokenizer
    layers: int  # cache layers
    full_attention: bool  # every layer attends to the whole sequence (no sliding window)
    context_window: int | None  # the model's own, from its config
    # SDPA without repeated key/value heads while it computes (decoding.grouped_query_attention):
    # on the CPU under transformers' SDPA; on a GPU, SDPA picks its fused kernels itself, and
    # a model that asked for another attention keeps it
    grouped_attention: bool = False


def import_libraries() -> None:
    """Import torch, transformers, outlines and llguidance, or say how to install them;
    refuse a transformers that is too old."""
    # nothing here gains from torch.compile, and a compile costs seconds on the first call
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    _return_freed_tensors_to_the_os()
    try:
        import outlines  # noqa: F401
        import torch  # noqa: F401
        import transformers
        from outlines.backends.llguidance import LLGuidanceBackend  # noqa: F401

        from radmatch_audit.judges import decoding  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "the in-process judge needs torch, transformers, outlines and llguidance: "
            + install_command("local")
        ) from exc
    check_transformers(transformers.__version__)


def load_model(model_dir: Path, device: str | None = None) -> LoadedModel:
    """The model of `model_dir` on `device` (the GPU when there is one, else the CPU):
    fp32 on the CPU, bf16 on an accelerator. Call `import_libraries` first."""
    import outlines
    import torch
    from outlines.backends.llguidance import LLGuidanceBackend
    from transformers import AutoTokenizer, DynamicCache

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        torch.set_num_threads(cpu_threads())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # every special token of this tokenizer reaches it as plain text (control_strings)
    control_tokens = tokenizer_tokens(tokenizer)
    hf_model = _placed_model(model_dir, device)
    hf_model.eval()
    layers = DynamicCache(config=hf_model.config)  # the kinds of layer the model caches
    outlines_model = outlines.from_transformers(hf_model, tokenizer)
    return LoadedModel(
        device=device, tokenizer=tokenizer, hf_model=hf_model, outlines_model=outlines_model,
        # llguidance works out each token's mask as it decodes: a schema costs milliseconds,
        # not the seconds to a minute (and hundreds of MB) of outlines-core's vocabulary index
        grammar_backend=LLGuidanceBackend(outlines_model),
        control_tokens=control_tokens,
        layers=len(layers.layers),
        # such a layer's cache can be a buffer written in place
        full_attention=all_dynamic(layers),
        context_window=getattr(hf_model.config, "max_position_embeddings", None),
        grouped_attention=device == "cpu" and getattr(hf_model.config, "_attn_implementation", None) == "sdpa",
    )


def _placed_model(model_dir: Path, device: str) -> Any:
    """The weights on `device`; on the GPU(s) only when they fit there whole."""
    import torch
    from transformers import AutoModelForCausalLM

    if device == "cpu":
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    # bf16 on the accelerator(s); accelerate places the layers
    if device == "cuda":  # refuse before minutes of loading, with the numbers
        free = [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]
        problem = gpu_spill_problem(bf16_weight_bytes(Path(model_dir)), free)
        if problem:
            raise JudgeUnavailable(problem)
    hf_model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16, device_map="auto" if device == "cuda" else device
    )
    spilled = spilled_modules(getattr(hf_model, "hf_device_map", None))
    if spilled:  # the estimate above missed: still never run half on the CPU
        raise JudgeUnavailable(
            f"{len(spilled)} module(s) of the model did not fit on the GPU(s) and were "
            f"placed on the CPU or disk ({', '.join(spilled[:3])}, ...): serve a model "
            "this size with vLLM (serve/start_vllm.sh), or choose a smaller model"
        )
    return hf_model


def check_transformers(version: str) -> None:
    """Refuse a transformers without the `cache` names this judge uses."""
    parts = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    if parts < TRANSFORMERS_MIN:
        raise ImportError(
            f"the in-process judge needs transformers>=5.24 (it passes the prefix cache as "
            f"`cache=`), found {version}: pip install 'transformers>=5.24,<6'"
        )


def bf16_weight_bytes(model_dir: Path) -> int:
    """The weights' size in bf16, from the safetensors files and the dtype they hold."""
    files = list(Path(model_dir).glob("*.safetensors"))
    stored = sum(f.stat().st_size for f in files)
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "bfloat16")
    return stored // 2 if "32" in dtype else stored


def gpu_spill_problem(weight_bytes: int, free_bytes: list[int]) -> str | None:
    """Why `device_map="auto"` would put part of the model on the CPU, or None if it fits."""
    usable = sum(int(free * GPU_HEADROOM) for free in free_bytes)
    if weight_bytes <= usable:
        return None
    gib = 2**30
    return (
        f"the model's weights need about {weight_bytes / gib:.1f} GiB in bf16, and the "
        f"{len(free_bytes)} GPU(s) have {sum(free_bytes) / gib:.1f} GiB free "
        f"({usable / gib:.1f} GiB usable for weights): device_map='auto' would put the rest "
        "on the CPU, where generation is 10-100 times slower. Serve a model this size with "
        "vLLM (serve/start_vllm.sh, then --base-url), or choose a smaller model"
    )


def spilled_modules(device_map: dict[str, Any] | None) -> list[str]:
    """The modules accelerate placed on the CPU or disk."""
    return [name for name, where in (device_map or {}).items() if str(where) in ("cpu", "disk")]


def cpu_threads() -> int:
    """Threads for CPU generation: $RADMATCH_TORCH_THREADS, else half the cores.

    Generation is a long run of small parallel regions; when other processes hold the
    cores, a thread per core spends its time waiting for descheduled siblings. On 2
    busy cores a 40-token answer took 10.5 s with 2 threads and 1.2 s with 1.
    """
    override = os.environ.get(THREADS_ENV)
    if override:
        return max(1, int(override))
    return max(1, (os.cpu_count() or 2) // 2)


def all_dynamic(cache: Any) -> bool:
    """Whether every layer of the cache is a plain DynamicLayer (keys and values grown by concatenation)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer).__name__ == "DynamicLayer" for layer in layers)


def _return_freed_tensors_to_the_os() -> None:
    """Serve allocations of 1 MiB and more with mmap, so that a freed one leaves the process.

    Each call allocates its own key/value buffers (a few hundred MB, sized to its prompt and
    answer budget) and frees them at its end; glibc's adaptive threshold then serves such
    blocks from its heap, where the freed ones, each a different size from the next
    request, stay. With a fixed threshold the main job peaks at 1.63 GB, against 2.13 GB
    without, for the same CPU time (BENCHMARKS.md, "The main job").
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD (glibc); elsewhere there is nothing to do
    except (OSError, AttributeError):
        pass
