"""A judge behind an OpenAI-compatible chat API (vLLM, or a hosted API on opt-in).

Outlines turns each answer model into the request field that constrains decoding,
once per model: `structured_outputs` for vLLM (its Outlines or xgrammar backend
enforces the schema on the server), `response_format` json_schema for a hosted API.
The request itself is a plain POST (`judges.transport`) of a body whose other fields
are fixed for the run, so one call costs a `json.dumps` and the network, not a rebuild
of the schema and an SDK's parameter transforms.

Faults are sorted at one point (`judges.faults`): connection errors, timeouts,
408/429/5xx and a cut-off or unreadable 200 body are transient; 4xx are not; an answer
that hit its token budget or was refused is an invalid answer.

Report text goes only where the user pointed: a non-local endpoint needs an explicit
opt-in, proxy variables are ignored unless the same opt-in is given, and a redirect is
never followed. The API key lives only in the transport's headers: never in a record,
a log line, an error or a repr.

Identity: the pre-flight reads `/v1/models`, where vLLM names the weights it loaded
(`root`) and its context (`max_model_len`). Both go into the records and the cache key
(`settings`), so that two servers of one served name but different weights never share
answers; the context bounds every call's prompt and answer budget. An answer that names
another model than the one checked fails its call.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from radmatch_audit.core.control_strings import tokenizer_info_tokens
from radmatch_audit.core.vocabulary import check_choice
from radmatch_audit.files.paths import install_command
from radmatch_audit.judges.base import (
    InvalidAnswerError,
    JudgeError,
    JudgeResult,
    JudgeUnavailable,
    Message,
    TransientJudgeError,
    Usage,
    estimate_tokens,
)
from radmatch_audit.judges.endpoints import check_endpoint, check_url
from radmatch_audit.judges.faults import KEY_HINT, redirect_message, status_error, unreachable_error
from radmatch_audit.judges.transport import HttpTransport, Unreachable

BACKENDS = ("vllm", "hosted")
# margins on the server's measured characters per token: the fixed prompt is text like the
# one measured; report text (digits, abbreviations) can take more tokens a character
PREFIX_MARGIN, PAIR_MARGIN = 1.1, 1.5
ENCODED_ENTRIES = 256  # encoded prefixes kept: stages x modalities x exemplar counts


class OpenAICompatibleJudge:
    """One served model. Its HTTP client is made on first use, on the caller's event loop."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        backend: str = "vllm",
        timeout_s: float = 300.0,
        temperature: float = 0.0,
        thinking: bool | None = None,
        context_window: int | None = None,
        allow_remote: bool = False,
    ) -> None:
        check_choice(backend, BACKENDS, "The 'backend' parameter")
        self.base_url = check_url(base_url)
        check_endpoint(self.base_url, allow_remote=allow_remote)
        try:
            import aiohttp  # noqa: F401
            import outlines  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                f"the server judge needs outlines and aiohttp: {install_command('judge')}"
            ) from exc
        self.backend = backend
        self.model = model
        self.context_window = context_window
        self.loaded_model: str | None = None  # vLLM's `root`, read by the pre-flight
        self.max_model_len: int | None = None  # the server's context, read by the pre-flight
        # its tokenizer's special tokens, where the server lists them (vLLM's /tokenizer_info)
        self.control_tokens: tuple[str, ...] = ()
        self._chars_per_token: float | None = None  # measured by the pre-flight, when it can
        self.timeout_s = timeout_s
        # a proxy is somewhere else: the same opt-in as a remote endpoint
        self._transport = HttpTransport(timeout_s=timeout_s, api_key=api_key, allow_proxy=allow_remote)
        self._fixed: dict[str, Any] = {"model": model, "temperature": temperature}
        if thinking is not None:
            self._fixed["chat_template_kwargs"] = {"enable_thinking": thinking}
        self.settings = {"temperature": temperature, "thinking": thinking}  # part of the cache key
        self._constraints: dict[type[BaseModel], dict[str, Any]] = {}
        # request parts that repeat, as JSON text: static prefixes, and the fields after the messages
        self._prefixes: dict[tuple[tuple[str, str], ...], str] = {}
        self._tails: dict[tuple[type[BaseModel], int], str] = {}

    def __repr__(self) -> str:
        return f"OpenAICompatibleJudge(backend={self.backend!r}, model={self.model!r}, base_url={self.base_url!r})"

    def constraint(self, schema: type[BaseModel]) -> dict[str, Any]:
        """The request field(s) Outlines sends for `schema`, computed once per model."""
        if schema not in self._constraints:
            from outlines.models.openai import OpenAITypeAdapter
            from outlines.models.vllm import VLLMTypeAdapter

            adapter = VLLMTypeAdapter() if self.backend == "vllm" else OpenAITypeAdapter()
            self._constraints[schema] = adapter.format_output_type(schema)
        return self._constraints[schema]

    def request_body(self, messages: list[Message], schema: type[BaseModel], max_tokens: int) -> dict[str, Any]:
        return {"messages": messages, "max_tokens": max_tokens, **self._fixed, **self.constraint(schema)}

    def encode_body(self, messages: list[Message], schema: type[BaseModel], max_tokens: int) -> bytes:
        """`json.dumps(request_body(...))`, byte for byte, with the parts that repeat encoded once.

        The static prefix (instructions and exemplars, ~40 KB) is the same string objects
        call after call, so it is encoded once per stage, modality and exemplar count;
        only the pair's own message is encoded per call.
        """
        *prefix, last = messages
        key = tuple((m["role"], m["content"]) for m in prefix)  # str hashes are cached
        head = self._prefixes.get(key)
        if head is None:
            if len(self._prefixes) >= ENCODED_ENTRIES:
                self._prefixes.clear()
            head = self._prefixes[key] = "".join(_dumps(m) + ", " for m in prefix)
        tail = self._tails.get((schema, max_tokens))
        if tail is None:  # one per schema and budget: a handful per run
            fields = {"max_tokens": max_tokens, **self._fixed, **self.constraint(schema)}
            tail = self._tails[(schema, max_tokens)] = _dumps(fields)[1:]
        return f'{{"messages": [{head}{_dumps(last)}], {tail}'.encode()

    def count_tokens(self, messages: list[Message]) -> int:
        """Tokens of `messages`, estimated from characters (never the server's tokenizer).

        The character estimate (`estimate_tokens`) errs high. When the pre-flight could
        measure the server's own characters per token on the extraction prompt (vLLM's
        /tokenize), that rate is used where it gives fewer tokens, with a margin: 10 % on
        the prompt's fixed part (instructions and exemplars, text like the one measured)
        and 50 % on the pair's own message (report text: digits, abbreviations).
        """
        upper = estimate_tokens(messages)
        if self._chars_per_token is None:
            return upper
        *prefix, last = messages
        fixed = sum(len(m["content"]) for m in prefix) * PREFIX_MARGIN
        own = len(last["content"]) * PAIR_MARGIN
        measured = int((fixed + own) / self._chars_per_token) + 8 * len(messages)
        return min(upper, measured)

    async def generate(
        self, messages: list[Message], schema: type[BaseModel], *, max_tokens: int
    ) -> JudgeResult:
        content = await self._post(
            "/chat/completions", self.encode_body(messages, schema, max_tokens), messages[-1]["content"]
        )
        try:
            data = json.loads(content)
            choice = data["choices"][0]
            message = choice["message"]
            text, refusal = message.get("content"), message.get("refusal")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise TransientJudgeError(
                f"the server's HTTP 200 answer was cut off or is not a chat completion "
                f"({len(content)} bytes)"
            ) from None
        if refusal:
            raise InvalidAnswerError("the judge refused to answer")
        if choice.get("finish_reason") == "length":
            raise InvalidAnswerError(
                f"the answer reached its token budget ({max_tokens}) before it was complete"
            )
        if not isinstance(text, str):
            raise InvalidAnswerError("the judge returned no text")
        self._check_answering_model(data.get("model"))
        return JudgeResult(text=text, usage=_usage(data.get("usage")))

    def _check_answering_model(self, named: Any) -> None:
        """An answer must come from the model checked at the start (or name none)."""
        if named is None or named == self.model or named == self.loaded_model:
            return
        if self.backend == "hosted" and isinstance(named, str) and named.startswith(self.model):
            return  # a hosted API answers with its dated snapshot of the model asked for
        checked = self.loaded_model or self.model
        raise JudgeError(
            f"the judge server answered as model {str(named)[:100]!r}, not {checked!r} "
            "(the model the run started with); a server serving another model is not "
            "the same judge"
        )

    async def _post(self, path: str, payload: bytes, pair_text: str = "") -> bytes:
        """The body of a 200 answer; any other outcome raises the matching JudgeError.

        `pair_text` is the pair's own message (the one holding report text): a server's
        error message that repeats part of it is left out of the error (`faults.shown`)."""
        try:
            reply = await self._transport.post(self.base_url + path, payload)
        except Unreachable as exc:
            raise unreachable_error(exc, self.timeout_s) from None
        if reply.status == 200:
            return reply.content
        raise status_error(reply.status, reply.headers, reply.content, pair_text, self._context_note())

    def _context_note(self) -> str:
        return f" of {self.max_model_len} tokens" if self.max_model_len else ""

    async def check(self) -> None:
        """Pre-flight: the server answers and serves this model, or JudgeUnavailable says the fix."""
        where = f"the judge server at {self.base_url}"
        try:
            reply = await self._transport.get(self.base_url + "/models")
        except Unreachable as exc:
            raise JudgeUnavailable(
                f"cannot reach {where} ({type(exc.cause).__name__}); start it (serve/start_vllm.sh) "
                "or correct --base-url"
            ) from None
        status = reply.status
        if status in (401, 403):
            raise JudgeUnavailable(f"{where} refused the API key (HTTP {status}); {KEY_HINT}")
        if 300 <= status < 400:
            raise JudgeUnavailable(f"{where}: {redirect_message(status, reply.headers.get('Location'))}")
        if status == 404 and not self.base_url.endswith("/v1"):
            await self._refuse_a_missing_v1(where)
        if status != 200:
            return  # some compatible servers list no models; the first call will tell
        try:
            listed = [m for m in json.loads(reply.content)["data"] if isinstance(m, dict)]
            served = [m["id"] for m in listed]
        except (ValueError, KeyError, TypeError):
            return
        if self.model not in served:
            raise JudgeUnavailable(f"{where} serves {served}, not {self.model!r}; pass --model with one of them")
        self._learn_identity(listed[served.index(self.model)])
        await self._learn_control_tokens()

    async def _learn_control_tokens(self) -> None:
        """The served tokenizer's special tokens, from vLLM's GET /tokenizer_info (at the
        server's root; serve/start_vllm.sh turns it on), so that a report holding one reaches
        the model as plain text. A server without it keeps the families listed by hand."""
        if self.backend != "vllm":
            return
        try:
            reply = await self._transport.get(self.base_url.removesuffix("/v1") + "/tokenizer_info")
            info = json.loads(reply.content) if reply.status == 200 else None
        except (Unreachable, ValueError):
            return
        self.control_tokens = tokenizer_info_tokens(info)

    async def _refuse_a_missing_v1(self, where: str) -> None:
        """After a 404 for /models: when the server answers at `base_url`/v1 (vLLM serves
        the OpenAI API only there), every call would 404 too, so refuse, naming the URL."""
        suggested = self.base_url + "/v1"
        try:
            serves_v1 = (await self._transport.get(suggested + "/models")).status == 200
        except Unreachable:
            serves_v1 = False
        if serves_v1:
            raise JudgeUnavailable(
                f"{where} answered HTTP 404 for /models but serves the OpenAI API under /v1: "
                f"pass --base-url {suggested} (an OpenAI-compatible base URL ends in /v1)"
            )

    async def calibrate(self, messages: list[Message]) -> None:
        """After the pre-flight, measure a vLLM server's characters per token on `messages`
        (its /tokenize, at the server's root): the runner sends the extraction prompt
        (`Evaluator.check`). Without an answer the estimate stays as it is."""
        if not (self.max_model_len and self.backend == "vllm"):
            return
        root = self.base_url.removesuffix("/v1")
        body = json.dumps({"model": self.model, "messages": messages}).encode("utf-8")
        try:
            reply = await self._transport.post(root + "/tokenize", body, quick=True)
            count = json.loads(reply.content)["count"] if reply.status == 200 else None
        except (Unreachable, ValueError, KeyError, TypeError):
            return
        chars = sum(len(m["content"]) for m in messages)
        if isinstance(count, int) and not isinstance(count, bool) and count > 0 and chars / count >= 1:
            self._chars_per_token = chars / count

    def _learn_identity(self, entry: dict[str, Any]) -> None:
        """The loaded weights and the context from the server's model entry (vLLM's
        `root` and `max_model_len`); the cache key and the context budget follow them."""
        root, length = entry.get("root"), entry.get("max_model_len")
        self.loaded_model = root if isinstance(root, str) and root else None
        valid_length = isinstance(length, int) and not isinstance(length, bool) and length > 0
        self.max_model_len = length if valid_length else None
        if self.max_model_len:
            self.context_window = min(self.context_window or self.max_model_len, self.max_model_len)
        known = {"loaded_model": self.loaded_model, "max_model_len": self.max_model_len}
        self.settings = {**self.settings, **{k: v for k, v in known.items() if v is not None}}

    async def aclose(self) -> None:
        await self._transport.close()


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _usage(block: Any) -> Usage:
    """Tokens as the server reported them; usage is informational, so a malformed block
    (a count that is not a non-negative whole number) is recorded as unknown (0), never
    fails a call whose answer is valid."""
    block = block if isinstance(block, dict) else {}
    prompt, completion = _count(block.get("prompt_tokens")), _count(block.get("completion_tokens"))
    return Usage(prompt_tokens=prompt or 0, completion_tokens=completion or 0,
                 reported=prompt is not None and completion is not None)


def _count(value: Any) -> int | None:
    """A token count, or None when `value` is not a non-negative whole number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None  # NaN and infinity too
    return int(value) if value >= 0 else None


__all__ = ["BACKENDS", "OpenAICompatibleJudge"]
