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
import json
import logging
import threading
import time
from collections import OrderedDict
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from radmatch_audit.judges.base import JudgeError, JudgeResult, Message, Usage
from radmatch_audit.judges.local_model import all_dynamic, import_libraries, load_model
from radmatch_audit.judges.prefix_store import PrefixStore, model_identity

log = logging.getLogger(__name__)

PREFIX_ENTRIES = 3  # prefilled prefixes kept: one per stage of one modality
GRAMMARS = 16  # schemas kept (the grading schema differs with every set of rows sent)


def compact_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """The answer model's JSON schema, decoded with no whitespace between JSON tokens:
    the exemplars are compact, and every whitespace token would be a decode step."""
    return {**schema.model_json_schema(), "x-guidance": {"whitespace_flexible": False}}


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
        model_dir: Path | None = None,
        *,
        model_name: str | None = None,
        context_window: int | None = None,
        device: str | None = None,
        temperature: float = 0.0,
        prefix_dir: Path | None = None,
    ) -> None:
        import_libraries()
        if model_dir is None:
            from radmatch_audit.files.paths import cache_root
            from radmatch_audit.judges import smollm

            model_dir = smollm.ensure_hf_dir()
            prefix_dir = prefix_dir or cache_root() / "prefixes"
            model_name = model_name or smollm.MODEL_NAME
            context_window = context_window or smollm.CONTEXT_WINDOW
        self.model = model_name or Path(model_dir).name
        loaded = load_model(model_dir, device)
        self.device = loaded.device
        self.control_tokens = loaded.control_tokens
        self.context_window = context_window or loaded.context_window
        self._tokenizer, self._hf_model = loaded.tokenizer, loaded.hf_model
        self._outlines, self._grammar_backend = loaded.outlines_model, loaded.grammar_backend
        self._layers, self._full_attention = loaded.layers, loaded.full_attention
        self._grouped_attention = loaded.grouped_attention
        import torch

        from radmatch_audit.judges import decoding

        self._torch, self._decoding = torch, decoding
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
        self, messages: list[Message], times: CallTimes | None = None, room: int = 0,
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

    def _prefix(self, messages: list[Message], times: CallTimes | None = None) -> tuple[Any, Any] | None:
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
                if store and all_dynamic(cache) and not store.save(prefix_text, ids, cache):
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

