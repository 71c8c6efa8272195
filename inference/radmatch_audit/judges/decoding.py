"""The in-process judge's decoding loop: grammar-constrained, one sequence, no copies.

Three things make a token cheap on a CPU, where decoding is bound by memory traffic
(BENCHMARKS.md, "The main job"):

- **a key/value cache written in place** (`GrowingLayer`): each layer's keys and values
  live in one buffer with room for the answer, and a token writes its slot. transformers'
  `DynamicLayer` concatenates the whole cache into new tensors at every token, which on
  a 5,300-token prefix cost more than the model's weights;
- **grouped-query attention without copies** (`grouped_query_attention`): SmolLM2 has
  3 key/value heads for 9 query heads, and transformers' SDPA path repeats the keys and
  values 3 times whenever a mask is present (every step of more than one token) unless
  `TRANSFORMERS_SDPA_FORCE_GQA=1` is set;
- **the grammar's forced tokens in one forward pass**: after a chosen token the grammar
  often allows one continuation only (a key's name, `","`, the rest of an enum value);
  llguidance gives those tokens (`compute_ff_tokens`) and they enter the model together
  with the chosen one, one forward pass for all. Greedy answers are the same tokens as
  token-by-token decoding: a forced token was the only one the mask allowed.

The grammar is Outlines' (its llguidance backend compiles the answer's JSON schema);
this loop drives the matcher itself because Outlines' logits processor takes one token
per step.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import llguidance
import llguidance.torch
import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from radmatch_audit.judges.base import JudgeError

FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"  # read by transformers' SDPA at every call
_force_gqa_lock = threading.Lock()
_force_gqa_users = 0
_force_gqa_before: Optional[str] = None


@contextmanager
def grouped_query_attention() -> Iterator[None]:
    """transformers' own SDPA attention shares each key/value head among its query heads
    (`enable_gqa`), mask or not, while inside: no repeated copy of the cache.

    transformers reads the switch from the process environment at every attention call,
    so it is set only while a judge computes and put back as it was when the last judge
    leaves (counted: judges in other threads may overlap). Meanwhile another model's SDPA
    in this process takes the same path, which gives the same attention (a test checks it).
    """
    global _force_gqa_users, _force_gqa_before
    with _force_gqa_lock:
        if _force_gqa_users == 0:
            _force_gqa_before = os.environ.get(FORCE_GQA)
            os.environ[FORCE_GQA] = "1"
        _force_gqa_users += 1
    try:
        yield
    finally:
        with _force_gqa_lock:
            _force_gqa_users -= 1
            if _force_gqa_users == 0:
                if _force_gqa_before is None:
                    os.environ.pop(FORCE_GQA, None)
                else:
                    os.environ[FORCE_GQA] = _force_gqa_before


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of a buffer with room to grow:
    a token is written into its slot, and the buffer is reallocated only when full."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = max(1, capacity)
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, dim = key_states.shape
        self.key_buffer = key_states.new_empty((batch, heads, self.capacity, dim))
        self.value_buffer = value_states.new_empty((batch, heads, self.capacity, value_states.shape[-1]))
        self.device, self.dtype = key_states.device, key_states.dtype
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        self.keys = self.key_buffer[:, :, : self.length]
        self.values = self.value_buffer[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.capacity = max(self.capacity, key_states.shape[-2])
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:  # half as much again: a few reallocations per answer at most
            self.capacity = max(end, self.capacity + self.capacity // 2)
            for name in ("key_buffer", "value_buffer"):
                old = getattr(self, name)
                grown = old.new_empty(old.shape[:2] + (self.capacity, old.shape[3]))
                grown[:, :, : self.length] = old[:, :, : self.length]
                setattr(self, name, grown)
        self.key_buffer[:, :, self.length : end] = key_states
        self.value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0 and self.is_initialized:
            self.length = max(0, self.length + tokens_to_remove)
            self._views()


def growing_cache(layers: int, capacity: int, prefix: Optional[Cache] = None) -> DynamicCache:
    """A cache of `GrowingLayer`s with room for `capacity` tokens, holding a copy of
    `prefix` (whose tensors are left as they are: other calls share them)."""
    cache = DynamicCache.__new__(DynamicCache)
    Cache.__init__(cache, layers=[GrowingLayer(capacity) for _ in range(layers)])
    if prefix is not None:
        for layer, source in zip(cache.layers, prefix.layers):
            layer.update(source.keys, source.values)
    return cache


@dataclass
class Decoded:
    """What one constrained generation produced, and how."""

    tokens: list[int] = field(default_factory=list)  # the answer's tokens, no end-of-sequence
    steps: int = 0  # forward passes: the first one prefills the pair's own message
    forced: int = 0  # tokens the grammar forced, fed in with the token before them
    token_times: list[float] = field(default_factory=list)  # perf_counter after each step
    stopped: bool = False  # the caller gave up before the answer was complete


def decode(
    model: Any,
    grammar: str,
    tokenizer: llguidance.LLTokenizer,
    cache: Cache,
    prompt_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    should_stop: Callable[[], bool] = lambda: False,
    fast_forward: bool = True,
) -> Decoded:
    """Generate from `prompt_ids` (the prompt's tokens after those `cache` holds) until
    `grammar` (an llguidance grammar over `tokenizer`) is complete, `max_new_tokens` are
    written, or `should_stop()` says so. `fast_forward=False` feeds forced tokens one
    forward pass each, as a plain logits processor would (for comparison)."""
    matcher = llguidance.LLMatcher(tokenizer, grammar)
    bitmask = llguidance.torch.allocate_token_bitmask(1, tokenizer.vocab_size)
    result = Decoded()
    pending = prompt_ids
    while True:
        if should_stop():
            result.stopped = True
            break
        # a complete answer stops the matcher: no forward pass for the end-of-sequence token
        if matcher.is_stopped() or len(result.tokens) >= max_new_tokens:
            break
        llguidance.torch.fill_next_token_bitmask(matcher, bitmask, 0)
        logits = model(input_ids=pending, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]
        result.steps += 1
        mask = bitmask[0] if logits.device.type == "cpu" else bitmask[0].to(logits.device, non_blocking=True)
        llguidance.torch.apply_token_bitmask_inplace(logits, mask)
        token = _choose(logits, temperature)
        if not matcher.consume_token(token):
            raise JudgeError(f"the grammar refused token {token}: {matcher.get_error()}")
        result.token_times.append(time.perf_counter())
        if token in tokenizer.eos_tokens:
            break
        result.tokens.append(token)
        if matcher.is_stopped():
            break
        step = [token]
        forced = matcher.compute_ff_tokens()[: max_new_tokens - len(result.tokens)] if fast_forward else []
        if forced:
            if not matcher.consume_tokens(forced):
                raise JudgeError(f"the grammar refused its own forced tokens: {matcher.get_error()}")
            result.tokens.extend(forced)
            result.forced += len(forced)
            step.extend(forced)
        pending = torch.tensor([step], device=prompt_ids.device)
    return result


def _choose(logits: torch.Tensor, temperature: float) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1))
