"""The judge contract: one async method, messages and a schema in, a parsed answer out.

Exceptions::

    JudgeError                  a judge call failed; the pair is marked failed
    ├── TransientJudgeError     worth retrying (connection, timeout, 429, 5xx, a torn body)
    ├── InvalidAnswerError      the answer did not validate against the schema
    ├── JudgeUnavailable        the judge cannot serve at all (pre-flight): stop the run
    └── EndpointRefusedError    report text would leave the local network without opt-in

Messages name the cause and never quote report text or the API key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}
AnswerT = TypeVar("AnswerT", bound=BaseModel)


class JudgeError(RuntimeError):
    """A judge call failed."""


class TransientJudgeError(JudgeError):
    """A failure that a retry may cure; `retry_after` is the server's wish in seconds."""

    def __init__(self, message: str, *, retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InvalidAnswerError(JudgeError):
    """The judge answered, but not with JSON valid under the requested schema."""


class JudgeUnavailable(JudgeError):
    """The judge cannot serve any call (server down, model not served, key refused)."""


class EndpointRefusedError(JudgeError):
    """The endpoint is not local and the user did not opt in to sending reports there."""


@dataclass
class Usage:
    """Tokens one call cost, as the judge reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reported: bool = True  # False: the server gave no readable counts (then 0, meaning unknown)


@dataclass
class JudgeResult:
    """The raw answer text (JSON) and what it cost."""

    text: str
    usage: Usage = field(default_factory=Usage)


@runtime_checkable
class Judge(Protocol):
    """What the pipeline needs from a backend.

    `backend` and `model` identify the judge in records and cache keys;
    `context_window` (tokens, or None when unknown) drives the context budget.
    """

    backend: str
    model: str
    context_window: Optional[int]

    async def generate(
        self, messages: list[Message], schema: type[BaseModel], *, max_tokens: int
    ) -> JudgeResult:
        """Answer the chat under the JSON schema of `schema`; the text is validated later."""
        ...

    def count_tokens(self, messages: list[Message]) -> int:
        """Tokens the messages take in this judge's tokenizer (an estimate when unknown)."""
        ...

    async def check(self) -> None:
        """Pre-flight: raise JudgeUnavailable, saying the fix, when no call could succeed."""
        ...

    async def aclose(self) -> None:
        ...


def estimate_tokens(messages: list[Message]) -> int:
    """An upper estimate for judges without a local tokenizer (a served judge).

    Character counts, not the server's tokenizer: 3 characters a token (the usual BPE
    tokenizers take about 4 of English or JSON), every digit a token of its own (Gemma's
    tokenizer splits numbers into digits), one more token per byte beyond the first of a
    non-ASCII character, and 4 tokens a message for the chat template. It over-counts
    ordinary report text, so that a prompt it admits fits the server's context.
    """
    *prefix, last = messages or [{"content": ""}]
    return sum(_prefix_tokens(m["content"]) for m in prefix) + _text_tokens(last["content"])


@lru_cache(maxsize=1024)  # the static prefix is the same strings call after call
def _prefix_tokens(text: str) -> int:
    return _text_tokens(text)


def _text_tokens(text: str) -> int:
    digits = sum(map(text.count, "0123456789"))
    extra = 0 if text.isascii() else len(text.encode("utf-8", "surrogatepass")) - len(text)
    return -(-(len(text) - digits) // 3) + digits + extra + 4
