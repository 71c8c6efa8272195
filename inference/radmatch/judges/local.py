"""In-process judge: Outlines over a transformers model on the CPU.

The embedded default is SmolLM2-135M-Instruct (radmatch.smollm), so that a fresh
machine runs the whole pipeline with no server. It only exercises the pipeline: its
clinical judgement is not meaningful.
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
        self._torch = torch
        self._tokenizer = AutoTokenizer.from_pretrained(model_dir)
        hf_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        hf_model.eval()
        self.context_window = context_window or getattr(
            hf_model.config, "max_position_embeddings", None
        )
        self._outlines = outlines.from_transformers(hf_model, self._tokenizer)
        self._generators: dict[str, Any] = {}
        self._lock = threading.Lock()  # one generation at a time: the CPU is the bottleneck

    def count_tokens(self, messages: list[Message]) -> int:
        ids = self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)

    def _generator(self, schema: type[BaseModel]) -> Any:
        import outlines

        key = f"{schema.__module__}.{schema.__qualname__}:{id(schema)}"
        if key not in self._generators:  # compiling a schema's index takes seconds
            self._generators[key] = outlines.Generator(self._outlines, schema)
        return self._generators[key]

    def _generate_sync(self, messages: list[Message], schema: type[BaseModel], max_tokens: int) -> JudgeResult:
        from outlines.inputs import Chat

        with self._lock, self._torch.inference_mode():
            text = self._generator(schema)(Chat(messages), max_new_tokens=max_tokens)
            completion = len(self._tokenizer(text, add_special_tokens=False)["input_ids"])
            prompt = self.count_tokens(messages)
        return JudgeResult(text=text, usage=Usage(prompt_tokens=prompt, completion_tokens=completion))

    async def generate(
        self, messages: list[Message], schema: type[BaseModel], *, max_tokens: int
    ) -> JudgeResult:
        return await asyncio.to_thread(self._generate_sync, messages, schema, max_tokens)

    async def aclose(self) -> None:
        return None
