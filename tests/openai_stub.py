"""A real loopback HTTP server speaking the OpenAI chat API, with a toy judge behind it.

It records every request body, answers each stage with schema-valid JSON worked out
from the prompt (sentences become findings, identical sentences match), and can be
told to misbehave request by request (`faults`): "500", "401", "garbage", "short",
"sleep:SECONDS". Used by the HTTP-path tests and the judge-call benchmark; it is not a
model and its answers carry no clinical meaning.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

NEGATION = re.compile(r"^(no|without)\b|\b(normal|clear|unremarkable)\b", re.IGNORECASE)
MEASURE = re.compile(r"(\d+(?:\.\d+)?)\s*(mm|cm)\b", re.IGNORECASE)
HEADER = re.compile(r"^[A-Z][A-Z ]+:\s*", re.MULTILINE)


def _sentences(report: str) -> list[str]:
    text = HEADER.sub("", report)
    return [s.strip() for s in re.split(r"(?<=\.)\s+|\n+", text) if len(s.strip(" .")) > 2]


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", text.lower()).strip()


def toy_answer(title: str, user: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A schema-valid answer for one stage (chosen by the schema's title)."""
    if title == "IndicationAnswer":
        match = re.search(r"(?im)^(?:indication|clinical history|history)\s*:\s*(.+)$", user["report"])
        return {"indication": match.group(1).strip()[:200] if match else ""}
    if title == "ExtractionAnswer":
        cap = schema["properties"]["findings"].get("maxItems", 60)
        findings = []
        for sentence in _sentences(user["report"])[:cap]:
            quote = sentence.rstrip(".")[:100]
            findings.append({
                "text": (quote[:110] + ".") if quote else "Finding.",
                "clinical_status": "normal" if NEGATION.search(sentence) else "abnormal",
                "clinical_significance": "routine" if NEGATION.search(sentence) else "notable",
                "comparison": None,
                "measurements": [
                    {"value": float(v), "unit": u.lower(), "category": "size", "prior": False}
                    for v, u in MEASURE.findall(sentence)[:2]
                ],
                "evidence": [quote] if quote else [],
            })
        return {"findings": findings}
    if title == "MatchingAnswer":
        gt = {_key(f["text"]): f["finding_id"] for f in user["gt_findings"]}
        rows, used_gt, unmatched_pred = [], set(), []
        for pred in user["pred_findings"]:
            gt_id = gt.get(_key(pred["text"]))
            if gt_id and gt_id not in used_gt:
                used_gt.add(gt_id)
                rows.append({"pred_id": pred["finding_id"], "gt_id": gt_id,
                             "reasoning": "Same sentence.", "match_scope": "direct"})
            else:
                unmatched_pred.append(pred["finding_id"])
        unmatched_gt = [f["finding_id"] for f in user["gt_findings"] if f["finding_id"] not in used_gt]
        return {"matches": rows, "unmatched_pred": unmatched_pred, "unmatched_gt": unmatched_gt}
    if title == "GradingAnswer":
        return {"errors_per_match": [[] for _ in user["pairs"]]}
    raise ValueError(f"unknown schema {title!r}")


def _schema_of(body: dict[str, Any]) -> dict[str, Any]:
    if "structured_outputs" in body:
        return body["structured_outputs"]["json"]
    return body["response_format"]["json_schema"]["schema"]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up on a slow answer is part of the timeout tests


class StubServer:
    """`with StubServer() as server:` then point a client at `server.base_url`."""

    def __init__(self, *, api_key: Optional[str] = None, faults: Optional[list[str]] = None) -> None:
        self.api_key = api_key
        self.faults = list(faults or [])
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.endswith("/health"):
                    self._send(200, b"")
                else:
                    self._send(200, {"object": "list", "data": [{"id": "stub-judge", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with stub._lock:
                    stub.requests.append({"path": self.path, "body": body,
                                          "authorization": self.headers.get("Authorization")})
                    fault = stub.faults.pop(0) if stub.faults else "ok"
                if stub.api_key and self.headers.get("Authorization") != f"Bearer {stub.api_key}":
                    self._send(401, {"error": {"message": "invalid api key", "type": "unauthorized"}})
                    return
                if fault.startswith("sleep:"):
                    time.sleep(float(fault.split(":", 1)[1]))
                elif fault in ("500", "503", "429", "401", "400"):
                    self._send(int(fault), {"error": {"message": f"injected {fault}"}})
                    return
                schema = _schema_of(body)
                user = json.loads(body["messages"][-1]["content"])
                answer = toy_answer(schema.get("title", ""), user, schema)
                if fault == "short" and "errors_per_match" in answer:
                    answer["errors_per_match"] = answer["errors_per_match"][:-1]
                content = "{not json" if fault == "garbage" else json.dumps(answer)
                self._send(200, {
                    "id": "cmpl-stub", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "stub-judge"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": sum(len(m["content"]) // 4 for m in body["messages"]),
                              "completion_tokens": len(content) // 4,
                              "total_tokens": 0},
                })

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    def __enter__(self) -> "StubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
