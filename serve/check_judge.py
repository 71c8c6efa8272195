#!/usr/bin/env python3
"""Check that a RadMatch judge server answers, and answers in constrained JSON.

Standard library only: it runs on a bare workstation's python3.

    python3 serve/check_judge.py --url http://127.0.0.1:8000 [--api-key-file F]
        [--model radmatch-judge] [--wait 600]

Steps: GET /health (waiting up to --wait seconds for it), then one chat
completion with a tiny JSON schema in the vLLM ``structured_outputs`` field,
temperature 0 and a small token budget, and the answer validated against that
schema. It prints one line starting with ``ready:`` or ``not ready:`` and exits
with one of the codes below. The API key comes from --api-key-file, else from
the RADMATCH_API_KEY environment variable; it is never printed.

Exit codes: 0 ready; 2 usage; 3 server down (no /health); 4 key refused (401/403);
5 the model name is not served; 6 the answer is not valid JSON for the schema;
7 any other HTTP or protocol error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

READY, USAGE, DOWN, AUTH, NO_MODEL, BAD_ANSWER, OTHER = 0, 2, 3, 4, 5, 6, 7

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


def _base_url(url: str) -> str:
    url = url.rstrip("/")
    return url.removesuffix("/v1")


def _request(
    method: str, url: str, *, api_key: str | None, body: dict | None, timeout: float
) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for_health(base: str, *, wait_s: float, timeout: float) -> None:
    deadline = time.monotonic() + wait_s
    last = ""
    while True:
        try:
            status, _ = _request("GET", f"{base}/health", api_key=None, body=None, timeout=timeout)
            if status == 200:
                return
            last = f"/health answered HTTP {status}"
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            last = f"cannot reach {base}/health ({reason})"
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


def _served_models(base: str, api_key: str | None, timeout: float) -> list[str]:
    try:
        status, raw = _request(
            "GET", f"{base}/v1/models", api_key=api_key, body=None, timeout=timeout
        )
        if status == 200:
            return [m.get("id", "?") for m in json.loads(raw).get("data", [])]
    except (urllib.error.URLError, OSError, ValueError):
        pass
    return []


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
    url = f"{base}/v1/chat/completions"
    try:
        status, raw = _request("POST", url, api_key=api_key, body=body, timeout=timeout)
    except (urllib.error.URLError, OSError) as exc:
        raise CheckFailed(DOWN, f"server down: {url} ({getattr(exc, 'reason', exc)})") from None
    if status in (401, 403):
        hint = "wrong API key" if api_key else "the server requires an API key and none was given"
        raise CheckFailed(AUTH, f"HTTP {status} from {url}: {hint}")
    if status == 404:
        served = _served_models(base, api_key, timeout)
        raise CheckFailed(
            NO_MODEL,
            f"model {model!r} is not served here (served: {', '.join(served) or 'unknown'}); "
            "pass --model or set RADMATCH_MODEL",
        )
    if status != 200:
        raise CheckFailed(OTHER, f"HTTP {status} from {url}: {_error_message(raw)}")
    try:
        answer = json.loads(raw)
        choice = answer["choices"][0]
        content = choice["message"].get("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise CheckFailed(OTHER, f"not an OpenAI chat completion from {url}") from None
    try:
        _validate(content)
    except CheckFailed as exc:
        if choice.get("finish_reason") == "length":
            exc.reason += f"; the answer was cut at max_tokens={max_tokens}"
        raise
    return answer


def prefix_cache_hit_rate(base: str, timeout: float) -> str | None:
    """Hits over queries from /metrics, summed over labels; None when unavailable."""
    try:
        status, raw = _request("GET", f"{base}/metrics", api_key=None, body=None, timeout=timeout)
    except (urllib.error.URLError, OSError):
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
        "--api-key-file", help="file holding the API key (default: $RADMATCH_API_KEY)"
    )
    parser.add_argument(
        "--wait", type=float, default=0.0, help="seconds to wait for /health (default: 0, one try)"
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per HTTP request (default: 120)"
    )
    parser.add_argument(
        "--health-only", action="store_true", help="only wait for /health, send no request"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=64, help="token budget of the test answer (default: 64)"
    )
    args = parser.parse_args(argv)

    base = _base_url(args.url)
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
        answer = constrained_request(
            base,
            model=args.model,
            api_key=api_key,
            max_tokens=args.max_tokens,
            timeout=args.timeout,
        )
    except CheckFailed as exc:
        print(f"not ready: {exc.reason}", file=sys.stderr)
        return exc.code
    elapsed = time.monotonic() - started
    served = answer.get("model", args.model)
    line = f"ready: {served} at {base} answered schema-valid JSON in {elapsed:.1f} s"
    rate = prefix_cache_hit_rate(base, timeout=10.0)
    if rate:
        line += f"; prefix-cache hit rate {rate}"
    print(line)
    return READY


if __name__ == "__main__":
    sys.exit(main())
