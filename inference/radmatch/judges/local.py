"""In-process judge: Outlines over a transformers model, on the GPU when there is one.

The embedded default is SmolLM2-135M-Instruct (radmatch.smollm), so that a fresh
machine runs the whole pipeline with no server. It only exercises the pipeline: its
clinical judgement is not meaningful.

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

from radmatch.judges.base import JudgeResult, Message, Usage


class LocalTransformersJudge:
    """Greedy, grammar-constrained generation in this process, one call at a time."""

    backend = "transformers"

    def __init__(
        self,
        model_dir: Optional[Path] = None,
        *,
        model_name: Optional[str] = None,
        context_window: Optional[int] = None,
        device: Optional[str] = None,
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
        self._generators: dict[type[BaseModel], Any] = {}
        self._turn: Optional[asyncio.Lock] = None  # made on the loop that calls us
        self._closing = threading.Event()

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

        with torch.inference_mode():
            text = self._generator(schema)(
                Chat(messages),
                max_new_tokens=max_tokens,
                stopping_criteria=StoppingCriteriaList([_Abandoned()]),
            )
        completion = len(self._tokenizer(text, add_special_tokens=False)["input_ids"])
        return JudgeResult(
            text=text, usage=Usage(prompt_tokens=self.count_tokens(messages), completion_tokens=completion)
        )

    async def generate(
        self, messages: list[Message], schema: type[BaseModel], *, max_tokens: int
    ) -> JudgeResult:
        if self._turn is None:
            self._turn = asyncio.Lock()
        async with self._turn:  # waiting here is not generating: nothing times it
            stop = threading.Event()
            work = asyncio.ensure_future(
                asyncio.to_thread(self._generate_sync, messages, schema, max_tokens, stop)
            )
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                stop.set()  # the thread stops at its next token; the next call waits for it
                await asyncio.wait([work])
                if not work.cancelled():
                    work.exception()  # retrieved: the caller has gone, nobody wants it
                raise

    async def check(self) -> None:
        return None  # loaded, so it can serve

    async def aclose(self) -> None:
        self._closing.set()
