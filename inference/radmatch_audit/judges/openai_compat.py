"""A judge behind an OpenAI-compatible chat API (vLLM, or a hosted API on opt-in).

Outlines turns each answer model into the request field that constrains decoding,
once per model: `structured_outputs` for vLLM (its Outlines or xgrammar backend
enforces the schema on the server), `response_format` json_schema for a hosted API.
The request itself is a plain aiohttp POST of a body whose other fields are fixed for
the run, so one call costs a `json.dumps` and the network, not a rebuild of the
schema and an SDK's parameter transforms. (aiohttp, not httpx: httpx's pool scans
every connection for every request, which made 64 calls in flight CPU-bound.)

Faults are sorted here, at one point: connection errors, timeouts, 408/429/5xx and a
cut-off or unreadable 200 body are transient (429's Retry-After is kept); 4xx are
not; an answer that hit its token budget or was refused is an invalid answer.

Report text goes only where the user pointed: a non-local endpoint needs an explicit
opt-in, proxy variables (HTTP_PROXY, ALL_PROXY, ...) are ignored unless the same
opt-in is given, and a redirect is never followed (a 3xx is an error naming its
Location: following it would re-send the report text to a host nobody checked). The
API key lives only in the client's headers: never in a record, a log line, an error
or a repr.

Identity: the pre-flight reads `/v1/models`, where vLLM names the weights it loaded
(`root`) and its context (`max_model_len`). Both go into the records and the cache key
(`settings`), so that two servers of one served name but different weights never share
answers; the context bounds every call's prompt and answer budget. An answer that names
another model than the one checked fails its call.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import re
import time
from typing import Any, Optional

from pydantic import BaseModel

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
from radmatch_audit.files.paths import install_command
from radmatch_audit.core.vocabulary import check_choice

BACKENDS = ("vllm", "hosted")
# margins on the server's measured characters per token: the fixed prompt is text like the
# one measured; report text (digits, abbreviations) can take more tokens a character
PREFIX_MARGIN, PAIR_MARGIN = 1.1, 1.5
ENCODED_ENTRIES = 256  # encoded prefixes kept: stages x modalities x exemplar counts
KEY_HINT = (
    "set the variable named by --api-key-env (default RADMATCH_API_KEY) to the server's key"
)


class OpenAICompatibleJudge:
    """One served model. Its HTTP client is made on first use, on the caller's event loop."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: Optional[str] = None,
        backend: str = "vllm",
        timeout_s: float = 300.0,
        temperature: float = 0.0,
        thinking: Optional[bool] = None,
        context_window: Optional[int] = None,
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
        self.loaded_model: Optional[str] = None  # vLLM's `root`, read by the pre-flight
        self.max_model_len: Optional[int] = None  # the server's context, read by the pre-flight
        self._chars_per_token: Optional[float] = None  # measured by the pre-flight, when it can
        self.timeout_s = timeout_s
        self._allow_proxy = allow_remote  # a proxy is somewhere else: same opt-in
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._http: Any = None  # an aiohttp.ClientSession, made on first use
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

    def _client(self) -> Any:
        if self._http is None:
            import aiohttp

            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),  # the run loop bounds the calls
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, connect=min(10.0, self.timeout_s)),
                trust_env=self._allow_proxy,
                auto_decompress=True,
                cookie_jar=aiohttp.DummyCookieJar(),  # a judge API sets none; matching them costs per call
            )
        return self._http

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
        return f'{{"messages": [{head}{_dumps(last)}], {tail}'.encode("utf-8")

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
        error message that repeats part of it is left out of the error (`_shown`)."""
        import aiohttp

        started = time.perf_counter()
        try:
            async with self._client().post(
                self.base_url + path, data=payload, headers=self._headers, allow_redirects=False,
            ) as response:
                status, headers = response.status, response.headers
                content = await response.read()
        except asyncio.TimeoutError:
            raise TransientJudgeError(
                f"no answer from the judge server within {self.timeout_s:g} s (timeout)"
            ) from None
        except aiohttp.ClientError as exc:  # refused, reset, a body cut short
            took = time.perf_counter() - started
            raise TransientJudgeError(
                f"the connection to the judge server failed after {took:.1f} s "
                f"({type(exc).__name__}: {str(exc)[:120] or 'no detail'})"
            ) from None
        if status == 200:
            return content
        if 300 <= status < 400:
            raise JudgeError(_redirect_message(status, headers.get("Location")))
        detail = _server_message(content)  # read to sort the error; shown only as `_shown` gives it
        shown = _shown(detail, pair_text)
        if status == 429 or status == 408 or status >= 500:
            raise TransientJudgeError(
                f"HTTP {status} from the judge server: {shown}",
                retry_after=_retry_after(headers.get("Retry-After")),
            )
        if status in (401, 403):
            raise JudgeError(f"HTTP {status} from the judge server: the API key was refused; {KEY_HINT}")
        if status == 400 and _is_context_error(detail):
            raise JudgeError(
                f"HTTP 400 from the judge server: the prompt and answer budget exceed its "
                f"context{self._context_note()} ({shown})"
            )
        if status == 400 and "compilation timed out" in detail.lower():  # vLLM's words
            raise JudgeError(
                "HTTP 400 from the judge server: the server's grammar compile limit was "
                "reached compiling this stage's answer schema: raise it (serve/start_vllm.sh "
                "--compile-limit, VLLM_REGEX_COMPILATION_TIMEOUT_S) or serve with xgrammar, "
                f"start_vllm.sh's default ({shown[:80]})"
            )
        raise JudgeError(f"HTTP {status} from the judge server: {shown}")

    def _context_note(self) -> str:
        return f" of {self.max_model_len} tokens" if self.max_model_len else ""

    async def check(self) -> None:
        """Pre-flight: the server answers and serves this model, or JudgeUnavailable says the fix."""
        import aiohttp

        where = f"the judge server at {self.base_url}"
        try:
            async with self._client().get(
                self.base_url + "/models", headers=self._headers, allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=min(self.timeout_s, 10.0)),
            ) as response:
                status, content = response.status, await response.read()
                location = response.headers.get("Location")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise JudgeUnavailable(
                f"cannot reach {where} ({type(exc).__name__}); start it (serve/start_vllm.sh) "
                "or correct --base-url"
            ) from None
        if status in (401, 403):
            raise JudgeUnavailable(f"{where} refused the API key (HTTP {status}); {KEY_HINT}")
        if 300 <= status < 400:
            raise JudgeUnavailable(f"{where}: {_redirect_message(status, location)}")
        if status == 404 and not self.base_url.endswith("/v1"):
            await self._refuse_a_missing_v1(where)
        if status != 200:
            return  # some compatible servers list no models; the first call will tell
        try:
            listed = [m for m in json.loads(content)["data"] if isinstance(m, dict)]
            served = [m["id"] for m in listed]
        except (ValueError, KeyError, TypeError):
            return
        if self.model not in served:
            raise JudgeUnavailable(f"{where} serves {served}, not {self.model!r}; pass --model with one of them")
        self._learn_identity(listed[served.index(self.model)])

    async def _refuse_a_missing_v1(self, where: str) -> None:
        """After a 404 for /models: when the server answers at `base_url`/v1 (vLLM serves
        the OpenAI API only there), every call would 404 too, so refuse, naming the URL."""
        import aiohttp

        suggested = self.base_url + "/v1"
        try:
            async with self._client().get(
                suggested + "/models", headers=self._headers, allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=min(self.timeout_s, 10.0)),
            ) as response:
                serves_v1 = response.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
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
        import aiohttp

        if not (self.max_model_len and self.backend == "vllm"):
            return
        root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        body = json.dumps({"model": self.model, "messages": messages}).encode("utf-8")
        try:
            async with self._client().post(
                root + "/tokenize", data=body, headers=self._headers, allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=min(self.timeout_s, 10.0)),
            ) as response:
                status, content = response.status, await response.read()
            count = json.loads(content)["count"] if status == 200 else None
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
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
        if self._http is not None:
            await self._http.close()
            self._http = None


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _server_message(content: bytes) -> str:
    """The server's own error text, short (it never holds the key; it may name the model)."""
    text = content.decode("utf-8", errors="replace")
    try:
        error = json.loads(text).get("error")
        text = error.get("message") if isinstance(error, dict) else error or text
    except (ValueError, AttributeError):
        pass
    return (str(text).strip() or "no detail")[:200]


ECHO_WINDOW = 12  # characters of the pair's text, normalised, that a server's message may not repeat
ECHOED = "its message is left out: it repeats text that was sent"


def _shown(detail: str, pair_text: str) -> str:
    """The server's message as an error may show it: whole, or left out (`ECHOED`) when
    it repeats report text.

    A server, or a gateway in front of it, may quote the request in its error. Both
    sides are compared as lower-case letters and digits with every other run of
    characters made one space, so that a quote that was JSON-escaped or re-spaced
    still matches; the message is left out when any `ECHO_WINDOW` characters of it
    occur in the pair's message (or the whole pair's message occurs in it, when that
    is shorter). Left out, not scrubbed: what remains around a removed quote can still
    be report text cut by an escape. The static turns (the shipped instructions and
    exemplars) hold no report text and are not compared, so a server's own words
    that happen to read like the instructions are kept.
    """
    said, sent = _letters_and_digits(detail), _letters_and_digits(pair_text)
    if not sent.strip():
        return detail
    if len(sent) <= ECHO_WINDOW:
        echoed = sent.strip() in said
    else:
        echoed = any(said[i:i + ECHO_WINDOW] in sent for i in range(len(said) - ECHO_WINDOW + 1))
    return ECHOED if echoed else detail


def _letters_and_digits(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text.lower())


def _redirect_message(status: int, location: Optional[str]) -> str:
    where = repr(location[:200]) if location else "no Location"
    return (
        f"HTTP {status} from the judge server: a redirect to {where}, which RadMatch never "
        "follows (it would send report text to an address nobody checked); point --base-url "
        "at the server itself"
    )


_CONTEXT_WORDS = ("context length", "context window", "maximum context", "max_model_len",
                  "too many tokens", "prompt is too long", "input is too long")


def _is_context_error(detail: str) -> bool:
    lowered = detail.lower()
    return any(words in lowered for words in _CONTEXT_WORDS)


def _usage(block: Any) -> Usage:
    """Tokens as the server reported them; usage is informational, so a malformed block
    (a count that is not a non-negative whole number) is recorded as unknown (0), never
    fails a call whose answer is valid."""
    block = block if isinstance(block, dict) else {}
    prompt, completion = _count(block.get("prompt_tokens")), _count(block.get("completion_tokens"))
    return Usage(prompt_tokens=prompt or 0, completion_tokens=completion or 0,
                 reported=prompt is not None and completion is not None)


def _count(value: Any) -> Optional[int]:
    """A token count, or None when `value` is not a non-negative whole number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None  # NaN and infinity too
    return int(value) if value >= 0 else None


def _retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a Retry-After header: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


__all__ = ["BACKENDS", "OpenAICompatibleJudge"]
