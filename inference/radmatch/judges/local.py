"""In-process judge: Outlines over a transformers model, on the GPU when there is one.

The embedded default is SmolLM2-135M-Instruct (radmatch.smollm), so that a fresh
machine runs the whole pipeline with no server. It only exercises the pipeline: its
clinical judgement is not meaningful.

The static prefix of a stage's prompt (instructions and exemplars, thousands of tokens)
is prefilled once and its key/value cache reused by every call that starts with it,
as a server's prefix cache does; only the pair's own message is prefilled per call.
One generation runs at a time (the model is the bottleneck). A call has no wall-clock
timeout: `max_new_tokens` bounds it, and a slow or busy machine must not fail a pair.
A generation whose caller gave up (the run was cancelled or the judge closed) stops
at its next token, so that nothing keeps running behind the caller's back.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel

from radmatch.judges.base import JudgeError, JudgeResult, Message, Usage


THREADS_ENV = "RADMATCH_TORCH_THREADS"


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
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "the in-process judge needs torch, transformers and outlines: "
                "pip install 'radmatch[local]'"
            ) from exc
        if model_dir is None:
            from radmatch import smollm

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
            hf_model = AutoModelForCausalLM.from_pretrained(
                model_dir, dtype=torch.bfloat16, device_map="auto" if self.device == "cuda" else self.device
            )
        hf_model.eval()
        self.context_window = context_window or getattr(
            hf_model.config, "max_position_embeddings", None
        )
        self._outlines = outlines.from_transformers(hf_model, self._tokenizer)
        self._hf_model = hf_model
        self._generators: dict[type[BaseModel], Any] = {}
        self._prefixes: dict[str, tuple[Any, Any]] = {}  # prefix text -> (token ids, kv cache)
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

        if schema not in self._generators:  # compiling a schema's index takes seconds
            self._generators[schema] = outlines.Generator(self._outlines, schema)
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

    def _prefilled(self, messages: list[Message]) -> dict[str, Any]:
        """A `cache` holding the prompt's static prefix, when the prompt starts with it."""
        import copy

        tokenizer = self._tokenizer
        prefix_text = tokenizer.apply_chat_template(messages[:-1], tokenize=False)
        full_text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if len(messages) < 2 or not full_text.startswith(prefix_text):
            return {}
        if prefix_text not in self._prefixes:
            ids = tokenizer(prefix_text, return_tensors="pt", add_special_tokens=False)["input_ids"]
            ids = ids.to(self._hf_model.device)
            with self._torch.inference_mode():
                cache = self._hf_model(input_ids=ids, use_cache=True).cache
            self._prefixes[prefix_text] = (ids, cache)
        ids, cache = self._prefixes[prefix_text]
        full = tokenizer(full_text, return_tensors="pt", add_special_tokens=False)["input_ids"]
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
