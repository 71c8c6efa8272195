"""In-process judge: a transformers model under Outlines' grammar, on the GPU when there is one.

The embedded default is SmolLM2-135M-Instruct (radmatch_audit.judges.smollm), so that a fresh
machine runs the whole pipeline with no server. It only exercises the pipeline: its
clinical judgement is not meaningful.

The static prefix of a stage's prompt (instructions and exemplars, thousands of tokens)
is prefilled once and its key/value cache reused by every call that starts with it,
as a server's prefix cache does; only the pair's own message is prefilled per call.
The prefix is tokenized exactly as Outlines tokenizes the whole prompt (special tokens
included: a tokenizer that adds a BOS adds it to both), and only a few prefixes are
kept (least recently used first out): a 31B model's cache of one prefix is gigabytes.
Outlines' llguidance backend compiles each answer schema; `judges.decoding` decodes
(a cache written in place, the grammar's forced tokens in one forward pass).
One generation runs at a time (the model is the bottleneck). A call has no wall-clock
timeout: `max_new_tokens` bounds it, and a slow or busy machine must not fail a pair.
A generation whose caller gave up (the run was cancelled or the judge closed) stops
at its next token, so that nothing keeps running behind the caller's back.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel

from radmatch_audit.core.control_strings import tokenizer_tokens
from radmatch_audit.judges.base import JudgeError, JudgeResult, JudgeUnavailable, Message, Usage
from radmatch_audit.files.paths import install_command

log = logging.getLogger(__name__)

THREADS_ENV = "RADMATCH_TORCH_THREADS"
PREFIX_ENTRIES = 3  # prefilled prefixes kept: one per stage of one modality
GRAMMARS = 16  # schemas kept (the grading schema differs with every set of rows sent)
# prefilled prefixes kept on disk for the embedded CPU judge (about 0.2 GB each, fp32)
PREFIX_FILES = 6
# `cache=` / `.cache` (formerly `past_key_values`) appeared in transformers 5.24.0
TRANSFORMERS_MIN = (5, 24)
GPU_HEADROOM = 0.9  # of the free GPU memory, for the weights (activations and cache need the rest)


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


def gpu_spill_problem(weight_bytes: int, free_bytes: list[int]) -> Optional[str]:
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


def spilled_modules(device_map: Optional[dict[str, Any]]) -> list[str]:
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


def compact_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """The answer model's JSON schema, decoded with no whitespace between JSON tokens:
    the exemplars are compact, and every whitespace token would be a decode step."""
    return {**schema.model_json_schema(), "x-guidance": {"whitespace_flexible": False}}


def _dynamic(cache: Any) -> bool:
    """Whether every layer of the cache is a plain DynamicLayer (keys and values grown by concatenation)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer).__name__ == "DynamicLayer" for layer in layers)


class PrefixStore:
    """Prefilled prefixes on disk, so that a run does not prefill what an earlier one did.

    On 2 busy cores the three stages' prefixes (11,700 SmolLM2 tokens) take minutes to
    prefill; `scripts/setup.sh` fills the store for the default modality. A file is named
    by the hash of the model's identity and the prefix text, holds the prefix's token ids
    (checked on load) and its keys and values (safetensors: loading runs no code), and
    only the `PREFIX_FILES` most recently used are kept.

    The store only saves time, so it never fails a call: a file that cannot be read
    (truncated, corrupt, of another shape) is treated as missing, prefilled again and
    replaced; reading needs no write access (a read-only folder is read); and a save
    that fails (a full or read-only disk) is warned about once, after which `writable`
    is False and the judge keeps its prefixes in memory for the run.
    """

    def __init__(self, folder: Path, model_identity: str) -> None:
        self.folder = folder
        self.identity = model_identity
        self.writable = True  # until a save fails

    def _path(self, prefix_text: str) -> Path:
        digest = hashlib.sha256(f"{self.identity}\0{prefix_text}".encode()).hexdigest()
        return self.folder / f"{digest[:32]}.safetensors"

    def load(self, prefix_text: str, ids: Any, config: Any) -> Any:
        """The stored cache of `prefix_text`, or None (absent, unreadable, or other ids)."""
        import torch
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        from transformers import DynamicCache

        path = self._path(prefix_text)
        try:
            tensors = load_file(path)
            layers = len([k for k in tensors if k.startswith("k.")])
            if not torch.equal(tensors["ids"], ids.cpu()):
                return None
            kv = [(tensors[f"k.{i}"], tensors[f"v.{i}"]) for i in range(layers)]
            cache = DynamicCache(ddp_cache_data=kv, config=config)
            if len(cache.layers) != layers or cache.get_seq_length() != ids.shape[1]:
                raise ValueError("keys and values of another shape")
        except FileNotFoundError:
            return None
        except (OSError, KeyError, ValueError, RuntimeError, SafetensorError) as exc:
            log.info("a stored prefix could not be read (%s): prefilled again", exc)
            return None
        try:
            os.utime(path)  # most recently used
        except OSError:
            pass  # a read-only store is read all the same
        return cache

    def save(self, prefix_text: str, ids: Any, cache: Any) -> bool:
        """Keep the prefix on disk; False when it could not be (then `writable` is False)."""
        from safetensors import SafetensorError
        from safetensors.torch import save_file

        if not self.writable:
            return False
        tensors = {"ids": ids.cpu().contiguous()}
        for i, layer in enumerate(cache.layers):
            tensors[f"k.{i}"] = layer.keys.contiguous()
            tensors[f"v.{i}"] = layer.values.contiguous()
        path = self._path(prefix_text)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            save_file(tensors, partial)
            os.replace(partial, path)
            kept = sorted(self.folder.glob("*.safetensors"), key=lambda f: f.stat().st_mtime)
            for stale in kept[:-PREFIX_FILES]:
                stale.unlink(missing_ok=True)
        except (OSError, SafetensorError) as exc:  # safetensors reports ENOSPC as its own error
            self.writable = False
            try:
                partial.unlink(missing_ok=True)
            except OSError:
                pass
            log.warning(
                "could not keep prefilled prompt prefixes in %s (%s): they are kept in memory "
                "for this run, and a later run prefills them again", self.folder, exc,
            )
            return False
        return True


def model_identity(model_dir: Path) -> str:
    """What a stored prefix depends on: the weights (by name, size and time), dtype, versions."""
    import torch
    import transformers

    weights = sorted(Path(model_dir).glob("*.safetensors"))
    stats = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in weights]
    return json.dumps([str(Path(model_dir).resolve()), stats, "float32", torch.__version__,
                       transformers.__version__])


@dataclass
class CallTimes:
    """Where one call's time went (seconds), for benchmarks and the debug log."""

    prefix_prefill_s: float = 0.0  # the stage's static prefix, 0 when it was cached
    grammar_s: float = 0.0  # compiling the schema's grammar
    first_token_s: float = 0.0  # the pair's own message prefilled, and one token
    decode_s: float = 0.0  # every later token
    prefix_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    steps: int = 0  # forward passes
    forced_tokens: int = 0  # answer tokens the grammar forced (fed in with the step before)


class LocalTransformersJudge:
    """Grammar-constrained generation in this process, one call at a time; greedy unless
    a `temperature` above 0 asks for sampling (`--samples`)."""

    backend = "transformers"

    def __init__(
        self,
        model_dir: Optional[Path] = None,
        *,
        model_name: Optional[str] = None,
        context_window: Optional[int] = None,
        device: Optional[str] = None,
        temperature: float = 0.0,
        prefix_dir: Optional[Path] = None,
    ) -> None:
        # nothing here gains from torch.compile, and a compile costs seconds on the first call
        os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
        _return_freed_tensors_to_the_os()
        try:
            import outlines
            import torch
            import transformers
            from outlines.backends.llguidance import LLGuidanceBackend
            from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

            from radmatch_audit.judges import decoding
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "the in-process judge needs torch, transformers, outlines and llguidance: "
                + install_command("local")
            ) from exc
        check_transformers(transformers.__version__)
        if model_dir is None:
            from radmatch_audit.judges import smollm
            from radmatch_audit.files.paths import cache_root

            model_dir = smollm.ensure_hf_dir()
            prefix_dir = prefix_dir or cache_root() / "prefixes"
            model_name = model_name or smollm.MODEL_NAME
            context_window = context_window or smollm.CONTEXT_WINDOW
        self.model = model_name or Path(model_dir).name
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if self.device == "cpu":
            torch.set_num_threads(cpu_threads())
        self._torch = torch
        self._tokenizer = AutoTokenizer.from_pretrained(model_dir)
        # every special token of this tokenizer reaches it as plain text (control_strings)
        self.control_tokens = tokenizer_tokens(self._tokenizer)
        if self.device == "cpu":
            hf_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        else:  # bf16 on the accelerator(s); accelerate places the layers
            if self.device == "cuda":  # refuse before minutes of loading, with the numbers
                free = [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]
                problem = gpu_spill_problem(bf16_weight_bytes(Path(model_dir)), free)
                if problem:
                    raise JudgeUnavailable(problem)
            hf_model = AutoModelForCausalLM.from_pretrained(
                model_dir, dtype=torch.bfloat16, device_map="auto" if self.device == "cuda" else self.device
            )
            spilled = spilled_modules(getattr(hf_model, "hf_device_map", None))
            if spilled:  # the estimate above missed: still never run half on the CPU
                raise JudgeUnavailable(
                    f"{len(spilled)} module(s) of the model did not fit on the GPU(s) and were "
                    f"placed on the CPU or disk ({', '.join(spilled[:3])}, ...): serve a model "
                    "this size with vLLM (serve/start_vllm.sh), or choose a smaller model"
                )
        hf_model.eval()
        layers = DynamicCache(config=hf_model.config)  # the kinds of layer the model caches
        self._layers = len(layers.layers)
        # every layer attends to the whole sequence (no sliding window): its cache can be a
        # buffer written in place
        self._full_attention = _dynamic(layers)
        self.context_window = context_window or getattr(
            hf_model.config, "max_position_embeddings", None
        )
        # SDPA without repeated key/value heads (decoding.grouped_query_attention) while it
        # computes; on a GPU, transformers' SDPA picks its fused kernels itself, and a model
        # that asked for another attention keeps it
        self._grouped_attention = (
            self.device == "cpu" and getattr(hf_model.config, "_attn_implementation", None) == "sdpa"
        )
        self._decoding = decoding
        self._outlines = outlines.from_transformers(hf_model, self._tokenizer)
        # llguidance works out each token's mask as it decodes: a schema costs milliseconds,
        # not the seconds to a minute (and hundreds of MB) of outlines-core's vocabulary index
        self._grammar_backend = LLGuidanceBackend(self._outlines)
        self._hf_model = hf_model
        self._grammars: OrderedDict[type[BaseModel], str] = OrderedDict()
        # prefilled prefixes on disk: CPU only (a large model's would be gigabytes)
        self._prefix_store = (
            PrefixStore(Path(prefix_dir), model_identity(Path(model_dir)))
            if prefix_dir is not None and self.device == "cpu" else None
        )
        self.last_call = CallTimes()
        # prefix text -> (token ids, kv cache), least recently used first
        self._prefixes: OrderedDict[str, tuple[Any, Any]] = OrderedDict()
        # with the prefixes on disk, reading one back costs a fraction of a second (page
        # cache) against minutes of decoding: keep only the current stage's in memory
        self.prefix_entries = 1 if self._prefix_store is not None else PREFIX_ENTRIES
        self._turn = threading.Lock()  # taken in the worker thread: waiting blocks no event loop
        self._closing = threading.Event()
        self.temperature = temperature
        # part of the answer cache key; None keeps the greedy judge's entries as they were
        self.settings = {"temperature": temperature} if temperature > 0 else None

    def count_tokens(self, messages: list[Message]) -> int:
        ids = self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)

    def _grammar(self, schema: type[BaseModel]) -> str:
        """The llguidance grammar Outlines compiles from the answer model's JSON schema."""
        if schema in self._grammars:
            self._grammars.move_to_end(schema)
        else:
            processor = self._grammar_backend.get_json_schema_logits_processor(
                json.dumps(compact_schema(schema))
            )
            self._grammars[schema] = processor.grammar
            while len(self._grammars) > GRAMMARS:  # least recently used first
                self._grammars.popitem(last=False)
        return self._grammars[schema]

    def _generate_sync(
        self, messages: list[Message], schema: type[BaseModel], max_tokens: int, stop: threading.Event
    ) -> JudgeResult:
        closing = self._closing
        times = CallTimes()
        with self._turn, self._torch.inference_mode(), self._attention():
            if closing.is_set():
                raise JudgeError("the in-process judge was closed")
            if stop.is_set():
                raise asyncio.CancelledError()  # abandoned while it waited its turn
            started = time.perf_counter()
            grammar = self._grammar(schema)
            times.grammar_s = time.perf_counter() - started
            full = self._encode(self.prompt_text(messages)).to(self._hf_model.device)
            room = full.shape[1] + max_tokens
            cache = self._prefilled(messages, times, room=room, full=full) or self._call_cache(room)
            started = time.perf_counter()
            decoded = self._decoding.decode(
                self._hf_model, grammar, self._grammar_backend.llg_tokenizer, cache,
                full[:, cache.get_seq_length():], max_tokens, temperature=self.temperature,
                should_stop=lambda: stop.is_set() or closing.is_set(),
            )
            del cache  # freed before the next call's turn: two calls' buffers never coexist
        if decoded.token_times:
            times.first_token_s = decoded.token_times[0] - started
            times.decode_s = decoded.token_times[-1] - decoded.token_times[0]
        text = self._tokenizer.decode(decoded.tokens, skip_special_tokens=True)
        times.prompt_tokens = full.shape[1]
        times.completion_tokens = len(decoded.tokens)
        times.steps, times.forced_tokens = decoded.steps, decoded.forced
        self.last_call = times
        log.debug(
            "in-process call: grammar %.2f s, prefix prefill %.1f s (%d tokens), first token "
            "%.1f s, decode %.1f s for %d tokens in %d steps (%d forced)", times.grammar_s,
            times.prefix_prefill_s, times.prefix_tokens, times.first_token_s, times.decode_s,
            times.completion_tokens, times.steps, times.forced_tokens,
        )
        return JudgeResult(
            text=text,
            usage=Usage(prompt_tokens=times.prompt_tokens, completion_tokens=times.completion_tokens),
        )

    def _encode(self, text: str) -> Any:
        """Token ids of `text` as Outlines gives them to the model (special tokens added)."""
        ids, _ = self._outlines.tokenizer.encode(text)
        return ids

    def prompt_text(self, messages: list[Message]) -> str:
        """The prompt as Outlines renders a Chat."""
        return self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _prefilled(
        self, messages: list[Message], times: Optional[CallTimes] = None, room: int = 0,
        full: Any = None,
    ) -> Any:
        """A cache of its own for one generation, holding the prompt's static prefix and room
        for `room` tokens in all; None when the prompt does not start with a reusable prefix.
        `full` is the whole prompt's token ids, when the caller has them."""
        prefix = self._prefix(messages, times)
        if prefix is None:
            return None
        ids, cache = prefix
        # the same ids as the model will be given: a BOS added to the prompt is in both
        if full is None:
            full = self._encode(self.prompt_text(messages))
        n = ids.shape[1]
        if full.shape[1] <= n or not self._torch.equal(full[0, :n].to(ids.device), ids[0]):
            return None  # the tokens do not split at the prefix: prefill it all
        if times is not None:
            times.prefix_tokens = n
        return self._call_cache(max(room, n), prefix=cache)

    def _attention(self) -> AbstractContextManager:
        return self._decoding.grouped_query_attention() if self._grouped_attention else nullcontext()

    def _call_cache(self, capacity: int, prefix: Any = None) -> Any:
        """A generation's own key/value cache, holding a copy of `prefix` when given.

        Written in place (`decoding.growing_cache`) when every layer attends to the whole
        sequence; a model with sliding-window layers (whose caches keep only the window)
        gets transformers' own layers, the prefix's deep-copied.
        """
        if self._full_attention:
            return self._decoding.growing_cache(self._layers, capacity, prefix=prefix)
        if prefix is not None:
            return copy.deepcopy(prefix)
        from transformers import DynamicCache

        return DynamicCache(config=self._hf_model.config)

    def _prefix(self, messages: list[Message], times: Optional[CallTimes] = None) -> Optional[tuple[Any, Any]]:
        """The token ids and key/value cache of the prompt's static prefix (prefilled, read
        from disk or kept from an earlier call), or None when the prompt has none."""
        prefix_text = self._tokenizer.apply_chat_template(messages[:-1], tokenize=False)
        if len(messages) < 2 or not self.prompt_text(messages).startswith(prefix_text):
            return None
        if prefix_text in self._prefixes:
            self._prefixes.move_to_end(prefix_text)
        else:
            started = time.perf_counter()
            ids = self._encode(prefix_text).to(self._hf_model.device)
            store = self._prefix_store
            cache = store.load(prefix_text, ids, self._hf_model.config) if store else None
            if cache is None:
                with self._torch.inference_mode(), self._attention():
                    # logits of the last position only: all of them would be prefix x vocabulary
                    # floats (5,300 x 49,152 x 4 bytes = 1 GB for SmolLM2), all thrown away
                    cache = self._hf_model(input_ids=ids, use_cache=True, logits_to_keep=1).cache
                if store and _dynamic(cache) and not store.save(prefix_text, ids, cache):
                    self.prefix_entries = PREFIX_ENTRIES  # not on disk: every stage's in memory
                if times is not None:
                    times.prefix_prefill_s = time.perf_counter() - started
            self._prefixes[prefix_text] = (ids, cache)
            while len(self._prefixes) > self.prefix_entries:
                self._prefixes.popitem(last=False)
        return self._prefixes[prefix_text]

    def prefill(self, messages: list[Message]) -> None:
        """Prefill the static prefix of `messages` (kept in memory, and on disk where stored)."""
        with self._turn:
            self._prefix(messages)

    async def generate(
        self, messages: list[Message], schema: type[BaseModel], *, max_tokens: int
    ) -> JudgeResult:
        stop = threading.Event()
        work = asyncio.ensure_future(asyncio.to_thread(self._generate_sync, messages, schema, max_tokens, stop))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            stop.set()  # the thread stops at its next token (or before it starts)
            await asyncio.wait([work])
            if not work.cancelled():
                work.exception()  # retrieved: the caller has gone, nobody wants it
            raise

    async def check(self) -> None:
        return None  # loaded, so it can serve

    async def aclose(self) -> None:
        self._closing.set()


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
