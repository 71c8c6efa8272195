"""A judge server's faults sorted at one point, each into its typed JudgeError.

Connection errors, timeouts, 408/429/5xx are transient (429's Retry-After is kept);
a redirect, a refused key and any other 4xx are not. A server's own error message is
shown only when it repeats none of the report text that was sent (`shown`).
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from typing import Any

from radmatch_audit.judges.base import JudgeError, TransientJudgeError
from radmatch_audit.judges.transport import Unreachable

KEY_HINT = (
    "set the variable named by --api-key-env (default RADMATCH_API_KEY) to the server's key"
)
ECHO_WINDOW = 12  # characters of the pair's text, normalised, that a server's message may not repeat
ECHOED = "its message is left out: it repeats text that was sent"
CONTEXT_WORDS = ("context length", "context window", "maximum context", "max_model_len",
                 "too many tokens", "prompt is too long", "input is too long")


def unreachable_error(error: Unreachable, timeout_s: float) -> TransientJudgeError:
    """A call that got no reply: always worth another try."""
    if error.timed_out:
        return TransientJudgeError(f"no answer from the judge server within {timeout_s:g} s (timeout)")
    cause = error.cause
    return TransientJudgeError(
        f"the connection to the judge server failed after {error.elapsed_s:.1f} s "
        f"({type(cause).__name__}: {str(cause)[:120] or 'no detail'})"
    )


def status_error(
    status: int, headers: Any, content: bytes, pair_text: str = "", context_note: str = ""
) -> JudgeError:
    """The error for a reply other than 200. `pair_text` is the pair's own message (the one
    holding report text); `context_note` names the server's context, when known."""
    if 300 <= status < 400:
        return JudgeError(redirect_message(status, headers.get("Location")))
    detail = server_message(content)  # read to sort the error; shown only as `shown` gives it
    said = shown(detail, pair_text)
    if status == 429 or status == 408 or status >= 500:
        return TransientJudgeError(
            f"HTTP {status} from the judge server: {said}",
            retry_after=retry_after(headers.get("Retry-After")),
        )
    if status in (401, 403):
        return JudgeError(f"HTTP {status} from the judge server: the API key was refused; {KEY_HINT}")
    if status == 400 and is_context_error(detail):
        return JudgeError(
            f"HTTP 400 from the judge server: the prompt and answer budget exceed its "
            f"context{context_note} ({said})"
        )
    if status == 400 and "compilation timed out" in detail.lower():  # vLLM's words
        return JudgeError(
            "HTTP 400 from the judge server: the server's grammar compile limit was "
            "reached compiling this stage's answer schema: raise it (serve/start_vllm.sh "
            "--compile-limit, VLLM_REGEX_COMPILATION_TIMEOUT_S) or serve with xgrammar, "
            f"start_vllm.sh's default ({said[:80]})"
        )
    return JudgeError(f"HTTP {status} from the judge server: {said}")


def server_message(content: bytes) -> str:
    """The server's own error text, short (it never holds the key; it may name the model)."""
    text = content.decode("utf-8", errors="replace")
    try:
        error = json.loads(text).get("error")
        text = error.get("message") if isinstance(error, dict) else error or text
    except (ValueError, AttributeError):
        pass
    return (str(text).strip() or "no detail")[:200]


def shown(detail: str, pair_text: str) -> str:
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


def redirect_message(status: int, location: str | None) -> str:
    where = repr(location[:200]) if location else "no Location"
    return (
        f"HTTP {status} from the judge server: a redirect to {where}, which RadMatch never "
        "follows (it would send report text to an address nobody checked); point --base-url "
        "at the server itself"
    )


def is_context_error(detail: str) -> bool:
    lowered = detail.lower()
    return any(words in lowered for words in CONTEXT_WORDS)


def retry_after(value: str | None) -> float | None:
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
