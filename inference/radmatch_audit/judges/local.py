"""In-process judge: Outlines over a transformers model, on the GPU when there is one.

The embedded default is SmolLM2-135M-Instruct (radmatch_audit.smollm), so that a fresh
machine runs the whole pipeline with no server. It only exercises the pipeline: its
clinical judgement is not meaningful.

The static prefix of a stage's prompt (instructions and exemplars, thousands of tokens)
is prefilled once and its key/value cache reused by every call that starts with it,
as a server's prefix cache does; only the pair's own message is prefilled per call.
The prefix is tokenized exactly as Outlines tokenizes the whole prompt (special tokens
included: a tokenizer that adds a BOS adds it to both), and only a few prefixes are
kept (least recently used first out): a 31B model's cache of one prefix is gigabytes.
One generation runs at a time (the model is the bottleneck). A call has no wall-clock
timeout: `max_new_tokens` bounds it, and a slow or busy machine must not fail a pair.
A generation whose caller gave up (the run was cancelled or the judge closed) stops
at its next token, so that nothing keeps running behind the caller's back.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel

from radmatch_audit.judges.base import JudgeError, JudgeResult, JudgeUnavailable, Message, Usage
from radmatch_audit.paths import install_command

THREADS_ENV = "RADMATCH_TORCH_THREADS"
PREFIX_ENTRIES = 3  # prefilled prefixes kept: one per stage of one modality
# compiled grading grammars kept (one per set of rows sent); the other stages' are all kept
GRADING_GENERATORS = 8
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
    ) -> None:
        # torch.compile of an outlines-core kernel costs ~19 s on the first call; eager is fine
        os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
        try:
            import outlines
            import torch
            import transformers
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "the in-process judge needs torch, transformers and outlines: "
                + install_command("local")
            ) from exc
        check_transformers(transformers.__version__)
        if model_dir is None:
            from radmatch_audit import smollm

            model_dir = smollm.ensure_hf_dir()
            model_name = model_name or smollm.MODEL_NAME
            context_window = context_window or smollm.CONTEXT_WINDOW
        self.model = model_name or Path(model_dir).name
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if self.device == "cpu":
            torch.set_num_threads(cpu_threads())
        self._torch = torch
        self._tokenizer = AutoTokenizer.from_pretrained(model_dir)
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
        self.context_window = context_window or getattr(
            hf_model.config, "max_position_embeddings", None
        )
        self._outlines = outlines.from_transformers(hf_model, self._tokenizer)
        self._hf_model = hf_model
        self._generators: OrderedDict[type[BaseModel], Any] = OrderedDict()
        # prefix text -> (token ids, kv cache), least recently used first
        self._prefixes: OrderedDict[str, tuple[Any, Any]] = OrderedDict()
        self.prefix_entries = PREFIX_ENTRIES
        self._turn = threading.Lock()  # taken in the worker thread: waiting blocks no event loop
        self._closing = threading.Event()
        self.temperature = temperature
        # part of the answer cache key; None keeps the greedy judge's entries as they were
        self.settings = {"temperature": temperature} if temperature > 0 else None
        self._sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {}

    def count_tokens(self, messages: list[Message]) -> int:
        ids = self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)

    def _generator(self, schema: type[BaseModel]) -> Any:
        import outlines

        if schema in self._generators:
            self._generators.move_to_end(schema)
        else:  # compiling a schema's index takes seconds
            self._generators[schema] = outlines.Generator(self._outlines, schema)
            grading = [s for s in self._generators if s.__name__ == "GradingAnswer"]
            for stale in grading[:-GRADING_GENERATORS]:  # least recently used first
                del self._generators[stale]
        return self._generators[schema]

    def _generate_sync(
        self, messages: list[Message], schema: type[BaseModel], max_tokens: int, stop: threading.Event
    ) -> JudgeResult:
        from outlines.inputs import Chat
        from transformers import StoppingCriteria, StoppingCriteriaList

        closing = self._closing
        torch = self._torch

        class _Abandoned(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                done = stop.is_set() or closing.is_set()
                return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

        with self._turn, torch.inference_mode():
            if closing.is_set():
                raise JudgeError("the in-process judge was closed")
            if stop.is_set():
                raise asyncio.CancelledError()  # abandoned while it waited its turn
            text = self._generator(schema)(
                Chat(messages),
                max_new_tokens=max_tokens,
                stopping_criteria=StoppingCriteriaList([_Abandoned()]),
                **self._sampling,
                **self._prefilled(messages),
            )
        completion = len(self._tokenizer(text, add_special_tokens=False)["input_ids"])
        return JudgeResult(
            text=text, usage=Usage(prompt_tokens=self.count_tokens(messages), completion_tokens=completion)
        )

    def _encode(self, text: str) -> Any:
        """Token ids of `text` as Outlines gives them to the model (special tokens added)."""
        ids, _ = self._outlines.tokenizer.encode(text)
        return ids

    def prompt_text(self, messages: list[Message]) -> str:
        """The prompt as Outlines renders a Chat."""
        return self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _prefilled(self, messages: list[Message]) -> dict[str, Any]:
        """A `cache` holding the prompt's static prefix, when the prompt starts with it."""
        import copy

        prefix_text = self._tokenizer.apply_chat_template(messages[:-1], tokenize=False)
        full_text = self.prompt_text(messages)
        if len(messages) < 2 or not full_text.startswith(prefix_text):
            return {}
        if prefix_text in self._prefixes:
            self._prefixes.move_to_end(prefix_text)
        else:
            ids = self._encode(prefix_text).to(self._hf_model.device)
            with self._torch.inference_mode():
                cache = self._hf_model(input_ids=ids, use_cache=True).cache
            self._prefixes[prefix_text] = (ids, cache)
            while len(self._prefixes) > self.prefix_entries:
                self._prefixes.popitem(last=False)
        ids, cache = self._prefixes[prefix_text]
        # the same ids as the model will be given: a BOS added to the prompt is in both
        full = self._encode(full_text)
        n = ids.shape[1]
        if full.shape[1] <= n or not self._torch.equal(full[0, :n].to(ids.device), ids[0]):
            return {}  # the tokens do not split at the prefix: prefill it all
        return {"cache": copy.deepcopy(cache)}

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
