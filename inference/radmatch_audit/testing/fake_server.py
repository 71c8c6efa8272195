"""A fake OpenAI-compatible judge server on loopback, for tests and benchmarks.

POST /v1/chat/completions gets a schema-valid toy answer (radmatch_audit.testing.toy_judge);
GET /v1/models, /health, /metrics (vLLM's prefix-cache counters) and /fake/requests
(the request log, for a benchmark running the server in another process). HTTP/1.1
keep-alive like vLLM. Every request is recorded in `.requests`. Misbehaviour:

* faults, from the explicit `faults` list first (in the request log's order), then by
  content, then at random:
  "500" "503" "401" "400"; "429" or "429:N" (Retry-After: N, else `retry_after`);
  "garbage" (content not JSON); "short" (a grade answer one row short); "invalid" (JSON
  missing a required key); "truncated" (Content-Length of the whole body, half sent,
  socket closed); "truncated_json" (well framed, cut JSON); "reset" (RST, no response);
  "hang" or "hang:S" (answers after `hang_s` or S s); "sleep:S" (S s more); "ok";
  "redirect:URL" (307 to URL); "answer_model:NAME" (the completion names model NAME);
  "nonfinite" or "nonfinite:NUMBER" (an extraction answer whose first finding has a
  measurement of 1e999 or NUMBER, as raw JSON text); "bad_usage" (a usage block whose
  completion_tokens is "many"); "echo" or "echo:STATUS" (HTTP STATUS, default 400, whose
  error message quotes the request's last message, JSON-escaped, as some gateways do).
* identity and context, as vLLM's /v1/models gives them: `root` (the loaded weights) and
  `max_model_len`; with `max_model_len`, a chat request whose prompt (characters/4) and
  max_tokens exceed it gets vLLM's HTTP 400, and POST /tokenize counts a request's
  messages the same way (vLLM serves it beside /v1). `redirect`: every request gets a 307 there.
  `v1_only`: the OpenAI routes answer under /v1 only, as vLLM's do (elsewhere a 404).
* `always_fail_rate`: a request whose messages hash falls in that fraction gets a 500 on
  every attempt. `fault_rate` with `seed`: each attempt draws from `fault_kinds` by a
  hash of (seed, messages, attempt number), so the draw ignores thread order.
* `latency_s` (seconds, or a dict by stage title with "default") and `capacity` (at
  most N requests in service at once, like a GPU batch; the rest wait, `waited_s`). A
  request's answer leaves `latency_s` after it entered service (its arrival, or the
  moment a slot freed): the server's own work (the toy answer, the prefix-cache count,
  encoding) is done within that time, not added to it, as far as the CPU allows.

    python -m radmatch_audit.testing.fake_server --port 0 --latency 0.2 --capacity 64

prints its base URL on the first stdout line and serves until killed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import struct
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, Optional, Union

from radmatch_audit.testing.toy_judge import PrefixCache, break_answer, completion, schema_of, toy_answer

ERROR_STATUSES = ("500", "503", "429", "401", "400")
RANDOM_FAULTS = ("500", "503", "429", "reset", "truncated", "truncated_json", "invalid", "garbage")
Latency = Union[float, dict[str, float]]


def messages_digest(body: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a chat body's messages."""
    canonical = json.dumps(body.get("messages"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _fraction(text: str) -> float:
    """A number in [0, 1) that depends only on `text`."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:16], 16) / 2**64


class FaultChooser:
    """Which fault a chat request gets: the explicit list, then always-fail, then the rate."""

    def __init__(self, faults: list[str], fault_rate: float, seed: int,
                 kinds: tuple[str, ...], always_fail_rate: float) -> None:
        self.faults, self.fault_rate, self.seed = list(faults), fault_rate, seed
        self.kinds, self.always_fail_rate = tuple(kinds), always_fail_rate
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()

    def choose(self, digest: str) -> str:
        with self._lock:
            if self.faults:
                return self.faults.pop(0)
            attempt = self._attempts.get(digest, 0)
            self._attempts[digest] = attempt + 1
        if int(digest[:16], 16) / 2**64 < self.always_fail_rate:  # the content's own hash
            return "always_fail"
        draw = f"{self.seed}:{digest}:{attempt}"
        if self.kinds and _fraction(draw) < self.fault_rate:
            return self.kinds[int(_fraction(draw + ":kind") * len(self.kinds))]
        return "ok"


class LatencyGate:
    """At most `capacity` requests in service at once; each is served in its stage's latency."""

    def __init__(self, latency_s: Latency, capacity: Optional[int]) -> None:
        self.latency_s = latency_s
        self._slots = threading.BoundedSemaphore(capacity) if capacity else None

    def delay(self, title: str) -> float:
        if isinstance(self.latency_s, dict):
            return float(self.latency_s.get(title, self.latency_s.get("default", 0.0)))
        return float(self.latency_s or 0.0)

    @contextmanager
    def slot(self) -> Iterator[float]:
        """Hold a slot while serving; yields the seconds spent waiting for it."""
        if not self._slots:
            yield 0.0
            return
        queued = time.perf_counter()
        with self._slots:
            yield time.perf_counter() - queued

    def finish(self, title: str, started: float) -> None:
        """Sleep out the rest of the stage's latency for a request in service since `started`
        (a time.perf_counter() value)."""
        time.sleep(max(0.0, started + self.delay(title) - time.perf_counter()))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a burst of pooled connections must not overflow the backlog
    fake: "StubServer"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up (timeout, reset) is part of the tests


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as vLLM; every reply has a Content-Length
    # TCP_NODELAY, as vLLM's server (asyncio sets it): with Nagle's algorithm the body,
    # sent after the headers, waits for the client's delayed ACK, 40 ms on Linux
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    _entry: Optional[dict[str, Any]] = None  # this request's log entry (POST only)
    _arrived_clock = 0.0  # time.perf_counter() at the POST's arrival

    def _send(self, status: int, payload: Any, *, headers: Optional[dict[str, str]] = None,
              content_type: str = "application/json", cut: bool = False) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        if self._entry is not None:  # the log is complete before the client can read the reply
            self.server.fake._update(self._entry, status=status, finished=time.time())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data[: len(data) // 2] if cut else data)
        if cut:  # the promised length never arrives: the client sees the socket close
            self.close_connection = True

    def _log(self, body: Any, arrived: float, digest: Optional[str] = None) -> dict[str, Any]:
        return self.server.fake._record({
            "path": self.path, "body": body, "authorization": self.headers.get("Authorization"),
            "arrived": arrived, "client_port": self.client_address[1], "fault": None}, digest)

    def _openai_route(self, path: str, route: str) -> bool:
        """True when `path` is the OpenAI route (e.g. "/models"): under /v1 with `v1_only`."""
        path = path.split("?")[0].rstrip("/")
        return path == "/v1" + route if self.server.fake.v1_only else path.endswith(route)

    def _refusal(self, body: Any) -> Optional[tuple[int, str]]:
        """Why this POST is not a chat request the server can serve (status, message)."""
        if not self._openai_route(self.path, "/chat/completions"):
            return 404, "not found"
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return 400, "the body must be JSON with messages"
        return None

    def do_GET(self) -> None:
        fake, path = self.server.fake, self.path.split("?")[0].rstrip("/")
        self._log(None, time.time())["finished"] = time.time()
        if path.endswith("/health"):
            self._send(200, b"")
        elif fake.redirect:
            self._send(307, b"", headers={"Location": fake.redirect})
        elif self._openai_route(path, "/models"):
            entry: dict[str, Any] = {"id": fake.model, "object": "model"}
            if fake.root:
                entry["root"] = fake.root
            if fake.max_model_len:
                entry["max_model_len"] = fake.max_model_len
            self._send(200, {"object": "list", "data": [entry]})
        elif path.endswith("/tokenizer_info") and fake.tokenizer_info is not None:
            self._send(200, fake.tokenizer_info)
        elif path.endswith("/metrics"):
            self._send(200, fake.metrics_text().encode(), content_type="text/plain; version=0.0.4")
        elif path.endswith("/fake/requests"):
            self._send(200, fake.requests)
        else:
            self._send(404, {"error": {"message": f"no route {path}"}})

    def do_POST(self) -> None:
        fake = self.server.fake
        arrived, self._arrived_clock = time.time(), time.perf_counter()
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if self.path.rstrip("/").endswith("/tokenize") and fake.max_model_len and isinstance(body, dict):
            self._log(body, arrived)["finished"] = time.time()
            self._send(200, {"count": fake.prompt_tokens(body.get("messages") or []),
                             "max_model_len": fake.max_model_len})
            return
        refusal = self._refusal(body)
        self._entry = entry = self._log(body, arrived, None if refusal else messages_digest(body))
        try:
            if fake.redirect:
                self._send(307, b"", headers={"Location": fake.redirect})
            elif refusal:
                self._send(refusal[0], {"error": {"message": refusal[1]}})
            else:
                self._chat(fake, entry, body)
        finally:
            self._entry = None  # a keep-alive connection reuses this handler
            if "finished" not in entry:  # a reset or a crash: nothing was sent
                fake._update(entry, finished=time.time())

    def _chat(self, fake: "StubServer", entry: dict[str, Any], body: dict[str, Any]) -> None:
        fault = entry["fault"]  # drawn when the request was logged
        if fake.api_key and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
            self._send(401, {"error": {"message": "invalid api key", "type": "unauthorized"}})
            return
        kind, _, arg = fault.partition(":")
        if kind == "always_fail":
            self._send(500, {"error": {"message": "injected 500 (this request always fails)"}})
            return
        if kind in ERROR_STATUSES:
            wait = arg or (fake.retry_after if kind == "429" else None)
            headers = {"Retry-After": f"{float(wait):g}"} if wait is not None else None
            self._send(int(kind), {"error": {"message": f"injected {kind}"}}, headers=headers)
            return
        if kind == "echo":
            quoted = json.dumps(body.get("messages", [])[-1:])
            self._send(int(arg or 400), {"error": {"message": f"invalid request body: {quoted}"}})
            return
        if kind == "redirect":
            self._send(307, b"", headers={"Location": arg})
            return
        too_long = fake.context_error(body)
        if too_long:
            self._send(400, {"error": {"message": too_long, "type": "BadRequestError"}})
            return
        if kind == "reset":  # SO_LINGER 0: close() sends RST instead of FIN
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if kind in ("sleep", "hang"):
            fake._closing.wait(float(arg) if arg else fake.hang_s)
        try:
            schema = schema_of(body)
            title = schema.get("title", "")
            fake._update(entry, stage=title)
            user = json.loads(body["messages"][-1]["content"])
        except (KeyError, TypeError, ValueError) as exc:
            message = f"the toy judge cannot read this request: {exc}"
            self._send(400, {"error": {"message": message}})
            return
        with fake.gate.slot() as waited:
            # in service from arrival, or from when a slot freed for it
            started = self._arrived_clock if waited < 0.001 else time.perf_counter()
            fake._update(entry, waited_s=round(waited, 6))
            answer = toy_answer(title, user, schema)
            if kind == "short" and "grades" in answer:
                answer["grades"] = answer["grades"][:-1]
            if kind == "invalid":
                answer = break_answer(answer, schema)
            if kind == "nonfinite" and answer.get("findings"):
                answer["findings"][0]["measurements"] = [
                    {"value": "NONFINITE", "unit": "cm", "category": "size", "prior": False}]
            content = "{not json" if kind == "garbage" else json.dumps(answer)
            content = content.replace('"NONFINITE"', arg or "1e999")
            cached = fake.prefix_cache.observe(body["messages"])
            reply = completion(body, content, fake.model, cached)
            if kind == "answer_model":
                reply["model"] = arg
            if kind == "bad_usage":
                reply["usage"]["completion_tokens"] = "many"
            payload = json.dumps(reply).encode()
            if kind == "truncated_json":
                payload = payload[: len(payload) // 2]
            fake.gate.finish(title, started)
        self._send(200, payload, cut=kind == "truncated")


class StubServer:
    """`with StubServer() as server:` then point a client at `server.base_url`."""

    def __init__(self, *, api_key: Optional[str] = None, faults: Optional[list[str]] = None,
                 model: str = "stub-judge", fault_rate: float = 0.0, seed: int = 0,
                 fault_kinds: tuple[str, ...] = RANDOM_FAULTS, always_fail_rate: float = 0.0,
                 retry_after: Optional[float] = 1.0, hang_s: float = 60.0,
                 latency_s: Latency = 0.0, capacity: Optional[int] = None,
                 host: str = "127.0.0.1", port: int = 0, root: Optional[str] = None,
                 max_model_len: Optional[int] = None, redirect: Optional[str] = None,
                 v1_only: bool = False, tokenizer_info: Optional[dict[str, Any]] = None) -> None:
        self.api_key, self.model, self.v1_only = api_key, model, v1_only
        # vLLM's GET /tokenizer_info (served with --enable-tokenizer-info-endpoint); None: 404
        self.tokenizer_info = tokenizer_info
        self.root, self.max_model_len, self.redirect = root, max_model_len, redirect
        self.retry_after, self.hang_s = retry_after, hang_s
        self.chooser = FaultChooser(
            list(faults or []), fault_rate, seed, fault_kinds, always_fail_rate)
        self.gate = LatencyGate(latency_s, capacity)
        self.prefix_cache = PrefixCache()
        self._log: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = _Server((host, port), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True)  # quick shutdown

    @property
    def faults(self) -> list[str]:
        return self.chooser.faults

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request so far: path, body, authorization, arrived, finished, fault, status,
        stage, waited_s (a snapshot; times are time.time())."""
        with self._lock:
            return [dict(entry) for entry in self._log]

    def _record(self, entry: dict[str, Any], digest: Optional[str] = None) -> dict[str, Any]:
        """Log a request; a chat request (`digest` given) draws its fault in the same step,
        so the explicit faults go to requests in the log's order."""
        with self._lock:
            if digest is not None:
                entry["fault"] = self.chooser.choose(digest)
            self._log.append(entry)
        return entry

    def _update(self, entry: dict[str, Any], **fields: Any) -> None:
        with self._lock:
            entry.update(fields)

    @staticmethod
    def prompt_tokens(messages: list[dict[str, Any]]) -> int:
        """The fake tokenizer: characters/4 a message (as `completion`'s usage)."""
        return sum(len(str(m.get("content", ""))) // 4 for m in messages if isinstance(m, dict))

    def context_error(self, body: dict[str, Any]) -> Optional[str]:
        """vLLM's message when the prompt (characters/4) and max_tokens exceed max_model_len."""
        if not self.max_model_len:
            return None
        prompt = self.prompt_tokens(body["messages"])
        wanted = prompt + int(body.get("max_tokens") or 0)
        if wanted <= self.max_model_len:
            return None
        return (f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {wanted} tokens ({prompt} in the messages, "
                f"{body.get('max_tokens')} in the completion).")

    def chat_requests(self) -> list[dict[str, Any]]:
        chat = [r for r in self.requests if r["path"].rstrip("/").endswith("/chat/completions")]
        return [r["body"] for r in chat]

    def metrics_text(self) -> str:
        label = f'{{model_name="{self.model}"}}'
        lines = []
        for name, kind, value in (
            ("vllm:prefix_cache_queries_total", "counter", self.prefix_cache.queries),
            ("vllm:prefix_cache_hits_total", "counter", self.prefix_cache.hits),
        ):
            lines += [f"# TYPE {name} {kind}", f"{name}{label} {float(value)}"]
        return "\n".join(lines) + "\n"

    def __enter__(self) -> "StubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()


def _latency(text: str) -> Latency:
    """"0.2" or "ExtractionAnswer=0.3,default=0.1"."""
    if "=" not in text:
        return float(text)
    return {k.strip(): float(v) for k, v in (part.split("=", 1) for part in text.split(","))}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="A fake OpenAI-compatible judge server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="stub-judge")
    parser.add_argument("--latency", type=_latency, default=0.0,
                        help='"0.2" or by stage "ExtractionAnswer=0.3,default=0.1"')
    parser.add_argument("--capacity", type=int, default=None)
    parser.add_argument("--faults", default="", help="faults of the first requests: 500,reset,...")
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--fault-kinds", default=",".join(RANDOM_FAULTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--always-fail-rate", type=float, default=0.0)
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--hang-s", type=float, default=60.0)
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args(argv)
    server = StubServer(
        api_key=args.api_key, faults=[f for f in args.faults.split(",") if f], model=args.model,
        fault_rate=args.fault_rate, seed=args.seed, always_fail_rate=args.always_fail_rate,
        fault_kinds=tuple(k for k in args.fault_kinds.split(",") if k),
        retry_after=args.retry_after, hang_s=args.hang_s, latency_s=args.latency,
        capacity=args.capacity, host=args.host, port=args.port,
    )
    print(server.base_url, flush=True)
    try:
        server._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._closing.set()
        server._server.server_close()


if __name__ == "__main__":
    main()
