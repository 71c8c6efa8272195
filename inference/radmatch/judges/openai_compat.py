"""Judges behind an OpenAI-compatible HTTP API, driven through Outlines.

* `vllm` (the default): Outlines `from_vllm` over `openai.AsyncOpenAI`; the schema goes
  to the server in the `structured_outputs` request field and the server's grammar
  backend enforces it.
* `hosted`: Outlines `from_openai`; the schema goes as `response_format` json_schema.

Both refuse a non-local endpoint unless the user opted in (radmatch.endpoints). The
API key comes from the environment and lives only in the client: never in a record, a
log line or a repr.
"""

from __future__ import annotations

import contextvars
import json
import logging
from typing import Any, Optional

from pydantic import BaseModel

from radmatch.endpoints import check_endpoint
from radmatch.judges.base import (
    InvalidAnswerError,
    JudgeError,
    JudgeResult,
    Message,
    TransientJudgeError,
    Usage,
    estimate_tokens,
)

log = logging.getLogger(__name__)

# Usage of the response being received in this task; set around each call.
_usage_sink: contextvars.ContextVar[Optional[dict[str, Any]]] = contextvars.ContextVar(
    "radmatch_usage_sink", default=None
)


async def _capture_usage(response: Any) -> None:
    """httpx response hook: read `usage` off the body for the call that is waiting on it."""
    sink = _usage_sink.get()
    if sink is None or response.status_code != 200:
        return
    await response.aread()
    try:
        sink.update(json.loads(response.content).get("usage") or {})
    except (ValueError, AttributeError):
        pass


class OpenAICompatibleJudge:
    """One Outlines model over an AsyncOpenAI client, with a per-call timeout."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: Optional[str],
        backend: str = "vllm",
        timeout_s: float = 300.0,
        temperature: float = 0.0,
        thinking: Optional[bool] = None,
        context_window: Optional[int] = None,
        allow_remote: bool = False,
    ) -> None:
        if backend not in ("vllm", "hosted"):
            raise ValueError(f"The 'backend' parameter must be 'vllm' or 'hosted'; got {backend!r}")
        check_endpoint(base_url, allow_remote=allow_remote)
        try:
            import httpx
            import openai
            import outlines
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "the server judge needs outlines, openai and httpx: pip install 'radmatch[judge]'"
            ) from exc
        self.backend = backend
        self.model = model
        self.base_url = base_url
        self.context_window = context_window
        self.temperature = temperature
        self.thinking = thinking
        self.timeout_s = timeout_s
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            event_hooks={"response": [_capture_usage]},
        )
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "EMPTY",  # vLLM without --api-key accepts any value
            http_client=self._http,
            max_retries=0,  # the pipeline retries, with its own backoff
        )
        self._outlines = (
            outlines.from_vllm(self._client, model)
            if backend == "vllm"
            else outlines.from_openai(self._client, model)
        )

    def __repr__(self) -> str:
        return f"OpenAICompatibleJudge(backend={self.backend!r}, model={self.model!r}, base_url={self.base_url!r})"

    def count_tokens(self, messages: list[Message]) -> int:
        return estimate_tokens(messages)

    async def generate(
        self, messages: list[Message], schema: type[BaseModel], *, max_tokens: int
    ) -> JudgeResult:
        from outlines import exceptions as oe
        from outlines.inputs import Chat

        kwargs: dict[str, Any] = {"max_tokens": max_tokens, "temperature": self.temperature}
        if self.thinking is not None:
            kwargs["extra_body"] = {"chat_template_kwargs": {"enable_thinking": self.thinking}}
        sink: dict[str, Any] = {}
        token = _usage_sink.set(sink)
        try:
            text = await self._outlines(Chat(messages), schema, **kwargs)
        except (oe.APIConnectionError, oe.APITimeoutError, oe.RateLimitError, oe.ServerError) as exc:
            raise TransientJudgeError(_describe(exc)) from exc
        except oe.AuthenticationError as exc:
            raise JudgeError(
                "HTTP 401 from the judge server: the API key was refused; set the variable "
                "named by --api-key-env (default RADMATCH_API_KEY) to the server's key"
            ) from exc
        except oe.APIError as exc:
            raise JudgeError(_describe(exc)) from exc
        finally:
            _usage_sink.reset(token)
        if not isinstance(text, str):
            raise InvalidAnswerError("the judge returned no text")
        return JudgeResult(
            text=text,
            usage=Usage(
                prompt_tokens=int(sink.get("prompt_tokens") or 0),
                completion_tokens=int(sink.get("completion_tokens") or 0),
            ),
        )

    async def aclose(self) -> None:
        await self._http.aclose()


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    prefix = f"HTTP {status} from the judge server" if status else type(exc).__name__
    return f"{prefix}: {str(exc)[:200]}"
