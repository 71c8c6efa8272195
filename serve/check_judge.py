#!/usr/bin/env python3
"""Check that a RadMatch judge server answers, and answers in constrained JSON.

Runs on a bare workstation's python3 (standard library only); run with a python that
can import RadMatch's answer models (serve/.venv after serve/install.sh, or RadMatch's
own venv) it also checks what RadMatch will ask.

    python3 serve/check_judge.py --url http://127.0.0.1:8000 [--api-key-file F]
        [--model radmatch-judge] [--wait 600]

Steps: GET /health (waiting up to --wait seconds for it), then one chat completion
with a tiny JSON schema in the vLLM ``structured_outputs`` field, temperature 0 and a
small token budget, and the answer validated against that schema. Then, when the
answer models can be imported (``--answer-schemas auto``, the default): the three
answer schemas exactly as the client sends them, one token each, so that the server
has compiled and cached their grammars before the first pair ("ready" means the first
pair will not wait for a compile), and one real extraction (RadMatch's own
instructions and exemplars, a made-up report, the server's default thinking setting)
validated by RadMatch's answer model. It prints one line starting with ``ready:`` or
``not ready:`` and exits with one of the codes below. The API key comes from
--api-key-file, else from the RADMATCH_API_KEY environment variable; it is never
printed. The check talks to the server directly: proxy variables (http_proxy, ...)
are ignored, so the key never reaches a proxy, and a redirect is an error, not
followed.

Each request has one deadline for the whole answer (--timeout; --answer-timeout for
RadMatch's schemas and the real extraction), however slowly the server sends it. What
the server says (error texts, model names) is printed with control characters escaped.

Exit codes: 0 ready; 2 usage; 3 server down (no /health); 4 key refused (401/403);
5 the model name is not served; 6 the answer is not valid JSON for the schema (or,
for the real extraction, not valid for RadMatch's answer model); 7 any other HTTP or
protocol error, or no whole answer within the deadline; 8 the server's grammar compile
limit was reached (HTTP 400). ``--help`` lists them too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
from pathlib import Path

READY, USAGE, DOWN, AUTH, NO_MODEL, BAD_ANSWER, OTHER, COMPILE_LIMIT = 0, 2, 3, 4, 5, 6, 7, 8
REPO = Path(__file__).resolve().parents[1]

# The smallest schema that proves constrained decoding works end to end.
SCHEMA = {
    "type": "object",
    "properties": {"ready": {"type": "boolean"}},
    "required": ["ready"],
    "additionalProperties": False,
}
PROMPT = 'Reply with the JSON object {"ready": true} and nothing else.'


class CheckFailed(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


# C0 and C1 controls (escape sequences, newlines) and the bidirectional marks: a server's
# words (an error text, a model name) are shown with these escaped, one line, inert.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character written as an escape such as \\x1b."""
    return _CONTROLS.sub(lambda m: ascii(m.group())[1:-1], text)


class NotHTTP(OSError):
    """Something answered, but not in HTTP: up to the caller whether that means down."""


def _cut_off(conn: http.client.HTTPConnection, fired: threading.Event) -> None:
    """At the request's deadline: end whatever read or write is blocked on the socket."""
    fired.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _request(
    method: str, url: str, *, api_key: str | None, body: dict | None, timeout: float
) -> tuple[int, bytes]:
    """One HTTP request, answered within `timeout` seconds in all (connecting, sending,
    the status line, headers and body together; a server that trickles a byte at a
    time is cut off at the deadline: TimeoutError). Straight to the server: no proxy
    is consulted and a redirect is returned as it is, never followed."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = connection(parts.hostname or "", parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Accept": "application/json"}
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    fired = threading.Event()
    timer = threading.Timer(timeout, _cut_off, args=(conn, fired))
    timer.daemon = True
    timer.start()
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        status = resp.status
    except (OSError, http.client.HTTPException) as exc:
        if fired.is_set():
            raise TimeoutError(f"no whole answer within {timeout:g} s") from None
        if isinstance(exc, OSError):
            raise
        raise NotHTTP(f"not an HTTP answer ({type(exc).__name__})") from None
    finally:
        timer.cancel()
        conn.close()
    if fired.is_set():  # the cut-off came as the body ended: an answer cut short
        raise TimeoutError(f"no whole answer within {timeout:g} s")
    return status, raw


def _base_url(url: str) -> str:
    url = url.rstrip("/")
    return url.removesuffix("/v1")


def wait_for_health(base: str, *, wait_s: float, timeout: float) -> None:
    deadline = time.monotonic() + wait_s
    last = ""
    while True:
        try:
            status, _ = _request("GET", f"{base}/health", api_key=None, body=None, timeout=timeout)
            if status == 200:
                return
            last = f"/health answered HTTP {status}"
        except OSError as exc:
            last = f"cannot reach {base}/health ({exc})"
        if time.monotonic() >= deadline:
            raise CheckFailed(DOWN, f"server down: {last}")
        time.sleep(min(2.0, max(0.1, deadline - time.monotonic())))


def _error_message(raw: bytes) -> str:
    try:
        err = json.loads(raw)
        msg = err.get("error", err) if isinstance(err, dict) else err
        if isinstance(msg, dict):
            msg = msg.get("message", msg)
        return str(msg)[:300]
    except ValueError:
        return raw[:300].decode(errors="replace")


def _model_cards(base: str, api_key: str | None, timeout: float) -> list[dict]:
    """The model cards of /v1/models (objects only: an odd answer gives none), or []."""
    try:
        status, raw = _request("GET", f"{base}/v1/models", api_key=api_key, body=None, timeout=timeout)
        listing = json.loads(raw) if status == 200 else {}
    except (OSError, ValueError):
        return []
    cards = listing.get("data") if isinstance(listing, dict) else None
    return [card for card in cards if isinstance(card, dict)] if isinstance(cards, list) else []


def _served_models(base: str, api_key: str | None, timeout: float) -> list[str]:
    return [str(card.get("id", "?")) for card in _model_cards(base, api_key, timeout)]


def _max_model_len(base: str, model: str, api_key: str | None, timeout: float) -> int | None:
    """The served model's context length from vLLM's /v1/models, or None."""
    for card in _model_cards(base, api_key, min(timeout, 10.0)):
        if card.get("id") == model and isinstance(card.get("max_model_len"), int):
            return card["max_model_len"]
    return None


def _validate(content: object) -> None:
    if not isinstance(content, str):
        raise CheckFailed(BAD_ANSWER, "invalid JSON answer: the message has no text content")
    try:
        obj = json.loads(content)
    except ValueError:
        raise CheckFailed(
            BAD_ANSWER,
            f"invalid JSON answer: constrained decoding is not enforced (got {content[:80]!r})",
        ) from None
    if not (isinstance(obj, dict) and set(obj) == {"ready"} and isinstance(obj["ready"], bool)):
        raise CheckFailed(
            BAD_ANSWER, f"invalid JSON answer: does not match the schema (got {content[:80]!r})"
        )


def _post_chat(base: str, body: dict, *, api_key: str | None, timeout: float, what: str) -> dict:
    """POST a chat completion; any answer but a 200 chat completion raises CheckFailed."""
    url = f"{base}/v1/chat/completions"
    try:
        status, raw = _request("POST", url, api_key=api_key, body=body, timeout=timeout)
    except TimeoutError:
        raise CheckFailed(OTHER, f"no whole answer to {what} within {timeout:g} s") from None
    except NotHTTP as exc:
        raise CheckFailed(OTHER, f"{url} for {what}: {exc}") from None
    except OSError as exc:
        raise CheckFailed(DOWN, f"server down: {url} ({exc})") from None
    if status in (401, 403):
        hint = "wrong API key" if api_key else "the server requires an API key and none was given"
        raise CheckFailed(AUTH, f"HTTP {status} from {url}: {hint}")
    if status == 404:
        served = _served_models(base, api_key, timeout)
        raise CheckFailed(
            NO_MODEL,
            f"model {body['model']!r} is not served here (served: {', '.join(served) or 'unknown'}); "
            "pass --model or set RADMATCH_MODEL",
        )
    message = _error_message(raw)
    if status == 400 and compile_limit_reached(message):
        raise CheckFailed(COMPILE_LIMIT, f"HTTP 400 for {what}: {COMPILE_LIMIT_HINT} ({message[:120]})")
    if status != 200:
        raise CheckFailed(OTHER, f"HTTP {status} from {url} for {what}: {message}")
    try:
        answer = json.loads(raw)
        answer["choices"][0]["message"].get("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise CheckFailed(OTHER, f"not an OpenAI chat completion from {url}") from None
    return answer


# vLLM's words when a grammar compile outlives VLLM_REGEX_COMPILATION_TIMEOUT_S (a 400).
COMPILE_LIMIT_HINT = (
    "the server's grammar compile limit was reached: raise it with serve/start_vllm.sh "
    "--compile-limit SECONDS (VLLM_REGEX_COMPILATION_TIMEOUT_S), or serve with the "
    "xgrammar backend (start_vllm.sh's default)"
)


def compile_limit_reached(message: str) -> bool:
    return "compilation timed out" in message.lower()


def constrained_request(
    base: str, *, model: str, api_key: str | None, max_tokens: int, timeout: float
) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "structured_outputs": {"json": SCHEMA},
        # A readiness probe need not think; templates without this flag ignore it.
        "chat_template_kwargs": {"enable_thinking": False},
    }
    answer = _post_chat(base, body, api_key=api_key, timeout=timeout, what="the test schema")
    choice = answer["choices"][0]
    try:
        _validate(choice["message"].get("content"))
    except CheckFailed as exc:
        if choice.get("finish_reason") == "length":
            exc.reason += f"; the answer was cut at max_tokens={max_tokens}"
        raise
    return answer


# ---- RadMatch's own answers ------------------------------------------------------

# A made-up report (no patient's): RadMatch's extraction prompt around it is the real one.
SAMPLE_REPORT = (
    "FINDINGS: The heart is mildly enlarged. Small right pleural effusion. "
    "No pneumothorax. A 9 mm nodule in the left upper lobe.\n"
    "IMPRESSION: Mild cardiomegaly and a small right pleural effusion. Left upper lobe nodule."
)
SAMPLE_INDICATION = "Shortness of breath."


class AnswerKit:
    """What RadMatch's client sends and accepts, imported from this repository's package."""

    def __init__(self) -> None:
        inference = REPO / "inference"
        if (inference / "radmatch_audit").is_dir() and str(inference) not in sys.path:
            sys.path.insert(0, str(inference))  # this repository's radmatch, not another install
        from radmatch_audit.judges.base import JudgeError, estimate_tokens
        from radmatch_audit.stages import pair_stages

        stages = pair_stages()  # a served judge's: SERVER_LIMITS, SERVER_MAX_TOKENS
        # the schema each stage's request carries (Outlines sends the model's JSON schema)
        self.schemas = {name: stage.grammar().model_json_schema() for name, stage in stages.items()}
        extract = stages["extract"]
        self.validator = extract.validator()
        self.max_tokens = extract.max_tokens
        user_input = {"report": SAMPLE_REPORT, "indication": SAMPLE_INDICATION}

        class Budget:  # what Prompt.fit asks of a judge: its context, a token count
            def __init__(self, window: int | None) -> None:
                self.context_window = window

            count_tokens = staticmethod(estimate_tokens)

        def messages(window: int | None) -> list[dict]:
            """The prompt with as many exemplars as the server's context holds, as the
            client builds it."""
            try:
                return extract.prompt("chest_xray").fit(Budget(window), user_input, self.max_tokens)[0]
            except JudgeError as exc:
                raise ValueError(str(exc)) from None

        self.messages = messages


def load_answer_kit() -> tuple[AnswerKit | None, str]:
    try:
        return AnswerKit(), ""
    except ImportError as exc:
        return None, f"{exc} (run this check with serve/.venv/bin/python or RadMatch's venv)"


def compile_answer_schemas(
    base: str, kit: AnswerKit, *, model: str, api_key: str | None, timeout: float
) -> dict[str, float]:
    """One single-token request per answer schema: the server compiles and caches each."""
    took = {}
    for stage, schema in kit.schemas.items():
        body = {
            "model": model,
            "messages": [{"role": "user", "content": "Reply with JSON."}],
            "temperature": 0,
            "max_tokens": 1,
            "structured_outputs": {"json": schema},
            "chat_template_kwargs": {"enable_thinking": False},
        }
        started = time.monotonic()
        _post_chat(base, body, api_key=api_key, timeout=timeout, what=f"the {stage} answer schema")
        took[stage] = time.monotonic() - started
    return took


def real_extraction(
    base: str, kit: AnswerKit, *, model: str, api_key: str | None, timeout: float
) -> tuple[int, float]:
    """One extraction as RadMatch sends it, with the server's default thinking setting
    (no chat_template_kwargs), validated by RadMatch's answer model: (findings, seconds)."""
    try:
        messages = kit.messages(_max_model_len(base, model, api_key, timeout))
    except ValueError as exc:  # the context cannot hold even the instructions and the answer
        raise CheckFailed(OTHER, f"the real extraction does not fit the server's context: {exc}") from None
    body = {
        "model": model,
        "messages": messages,
        "temperature": 0,
        "max_tokens": kit.max_tokens,
        "structured_outputs": {"json": kit.schemas["extract"]},
    }
    started = time.monotonic()
    answer = _post_chat(base, body, api_key=api_key, timeout=timeout, what="a real extraction")
    took = time.monotonic() - started
    choice = answer["choices"][0]
    content = choice["message"].get("content")
    if not isinstance(content, str):
        raise CheckFailed(BAD_ANSWER, "the real extraction came back with no text content")
    try:
        parsed = kit.validator.model_validate_json(content)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        errors = getattr(exc, "errors", list)()
        first = errors[0] if errors else {}
        where = ".".join(map(str, first.get("loc", ()))) or "the answer"
        reason = (f"the real extraction is not a valid RadMatch answer ({where}: "
                  f"{first.get('msg', str(exc)[:120])}); it starts {content[:60]!r}")
        if not content.lstrip().startswith("{"):
            reason += ("; text before the JSON: thinking text landed in the answer (check "
                       "--reasoning-parser gemma4, or start with --thinking off)")
        if choice.get("finish_reason") == "length":
            reason += (f"; cut at max_tokens={kit.max_tokens}: a repetition loop, or "
                       "thinking that used the whole budget")
        raise CheckFailed(BAD_ANSWER, reason) from None
    return len(parsed.findings), took


def prefix_cache_hit_rate(base: str, timeout: float) -> str | None:
    """Hits over queries from /metrics, summed over labels; None when unavailable."""
    try:
        status, raw = _request("GET", f"{base}/metrics", api_key=None, body=None, timeout=timeout)
    except OSError:
        return None
    if status != 200:
        return None
    totals = {"vllm:prefix_cache_hits_total": 0.0, "vllm:prefix_cache_queries_total": 0.0}
    for line in raw.decode(errors="replace").splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            try:
                totals[name] += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                pass
    hits, queries = totals.values()
    if queries <= 0:
        return None
    return f"{hits / queries:.1%} ({hits:.0f}/{queries:.0f} tokens)"


def read_api_key(path: str | None) -> str | None:
    if path:
        with open(path, encoding="utf-8") as fh:
            key = fh.read().strip()
        if not key:
            raise CheckFailed(USAGE, f"API key file {path} is empty")
        return key
    return os.environ.get("RADMATCH_API_KEY") or None


EXIT_CODES_HELP = """exit codes:
  0  ready (with --health-only: /health answered)
  2  usage: a bad option, an unreadable or empty key file, --answer-schemas on
     without RadMatch's answer models
  3  server down: no /health (within --wait), or the connection refused
  4  the API key was refused (HTTP 401/403), or none was given and one is needed
  5  the model name is not served (--model, RADMATCH_MODEL)
  6  the answer is not valid JSON for the schema, or the real extraction is not
     a valid RadMatch answer
  7  any other HTTP or protocol error, or no whole answer within --timeout
     (--answer-timeout for the answer schemas)
  8  the server's grammar compile limit was reached (HTTP 400)"""


def url_problem(base: str) -> str:
    """Why `base` is not a server address this check can use, or ''."""
    try:
        parts = urllib.parse.urlsplit(base)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected http://HOST:PORT or https://HOST:PORT"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("RADMATCH_BASE_URL", "http://127.0.0.1:8000"),
        help="server base URL, with or without /v1 (default: $RADMATCH_BASE_URL "
        "or http://127.0.0.1:8000)",
    )
    parser.add_argument(
        "--model",
        default=os.environ.get("RADMATCH_MODEL", "radmatch-judge"),
        help="served model name (default: $RADMATCH_MODEL or radmatch-judge)",
    )
    parser.add_argument(
        "--api-key-file",
        metavar="FILE",
        help="read the API key from this file (its whole content, surrounding whitespace "
        "removed); without it, the key itself is taken from the RADMATCH_API_KEY "
        "environment variable, or none is sent",
    )
    parser.add_argument(
        "--wait", type=float, default=0.0, help="seconds to wait for /health (default: 0, one try)"
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds for each whole HTTP request, the answer's last byte included (default: 120)"
    )
    parser.add_argument(
        "--health-only", action="store_true", help="only wait for /health, send no request"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=64, help="token budget of the test answer (default: 64)"
    )
    parser.add_argument(
        "--answer-schemas",
        choices=["auto", "on", "off"],
        default="auto",
        help="compile RadMatch's three answer schemas and run one real extraction: auto "
        "(when this python can import RadMatch's answer models), on (required), off",
    )
    parser.add_argument(
        "--answer-timeout",
        type=float,
        default=900.0,
        help="seconds for each answer-schema request: a compile, or the real extraction "
        "with thinking (default: 900)",
    )
    args = parser.parse_args(argv)

    base = _base_url(args.url)
    problem = url_problem(base)
    if problem:
        print(f"not ready: --url {printable(args.url)}: {problem}", file=sys.stderr)
        return USAGE
    started = time.monotonic()
    try:
        try:
            api_key = read_api_key(args.api_key_file)
        except OSError as exc:
            raise CheckFailed(USAGE, f"cannot read the API key file: {exc.strerror}") from None
        wait_for_health(base, wait_s=args.wait, timeout=min(args.timeout, 10.0))
        if args.health_only:
            print(f"up: {base}/health answered")
            return READY
        kit, missing = None, "not asked (--answer-schemas off)"
        if args.answer_schemas != "off":
            kit, missing = load_answer_kit()
            if kit is None and args.answer_schemas == "on":
                raise CheckFailed(USAGE, f"cannot import RadMatch's answer models: {missing}")
        answer = constrained_request(
            base,
            model=args.model,
            api_key=api_key,
            max_tokens=args.max_tokens,
            timeout=args.timeout,
        )
        elapsed = time.monotonic() - started
        if kit is not None:
            kwargs = {"model": args.model, "api_key": api_key, "timeout": args.answer_timeout}
            compiled = compile_answer_schemas(base, kit, **kwargs)
            findings, took = real_extraction(base, kit, **kwargs)
    except CheckFailed as exc:
        print(f"not ready: {printable(exc.reason)}", file=sys.stderr)
        return exc.code
    served = printable(str(answer.get("model", args.model)))
    line = f"ready: {served} at {base} answered schema-valid JSON in {elapsed:.1f} s"
    if kit is None:
        line += f"; RadMatch's answer schemas not checked: {missing}"
    else:
        times = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in compiled.items())
        line += (f"; answer schemas compiled ({times}); a real extraction with the server's "
                 f"default thinking gave {findings} valid finding(s) in {took:.1f} s")
    rate = prefix_cache_hit_rate(base, timeout=10.0)
    if rate:
        line += f"; prefix-cache hit rate {rate}"
    print(line)
    return READY


if __name__ == "__main__":
    sys.exit(main())
