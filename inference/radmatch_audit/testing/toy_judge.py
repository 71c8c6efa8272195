"""What the fake judge server computes in place of a model (radmatch_audit.testing.fake_server).

Schema-valid toy answers for the four judge stages, worked out from the prompt:
sentences become findings, identical sentences match, matched pairs carry no errors,
and an adjudicated unit with an abnormal finding (not a PAR) holds one error; the count
baseline counts the sentences that one report states and the other does not.
Also the completion envelope and vLLM-style prefix-cache accounting. It is not a model
and its answers carry no clinical meaning: it lets the pipeline, the HTTP client and
the benchmarks run without one.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from typing import Any

NEGATION = re.compile(r"^(no|without)\b|\b(normal|clear|unremarkable)\b", re.IGNORECASE)
MEASURE = re.compile(r"(\d+(?:\.\d+)?)\s*(mm|cm)\b", re.IGNORECASE)
HEADER = re.compile(r"^[A-Z][A-Z ]+:\s*", re.MULTILINE)
BLOCK_CHARS = 64  # a prefix-cache block: vLLM's 16 tokens at about 4 characters a token
STAGES = ("ExtractionAnswer", "MatchingAnswer", "GradingAnswer", "AdjudicationAnswer")


def _sentences(report: str) -> list[str]:
    text = HEADER.sub("", report)
    return [s.strip() for s in re.split(r"(?<=\.)\s+|\n+", text) if len(s.strip(" .")) > 2]


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", text.lower()).strip()


def toy_answer(title: str, user: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A schema-valid answer for one stage (chosen by the schema's title)."""
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
        unmatched_gt = [f["finding_id"] for f in user["gt_findings"]
                        if f["finding_id"] not in used_gt]
        return {"matches": rows, "unmatched_pred": unmatched_pred, "unmatched_gt": unmatched_gt}
    if title == "GradingAnswer":
        return {"grades": [{"pred_id": pair["pred_finding"]["finding_id"],
                            "gt_id": pair["gt_finding"]["finding_id"], "errors": []}
                           for pair in user["pairs"]]}
    if title == "AdjudicationAnswer":  # an abnormal finding missed or invented is one error
        return {"units": [
            {"unit": unit["unit"], "reasoning": f"Toy count for a {unit['kind']} unit.",
             "errors": int(unit["kind"] != "PAR" and any(
                 not NEGATION.search(text) for text in unit["reference_findings"] + unit["candidate_findings"]))}
            for unit in user["units"]
        ]}
    if title == "CountAnswer":  # the count baseline: sentences one report states and the other not
        reference = {_key(s) for s in _sentences(user["reference"])}
        candidate = {_key(s) for s in _sentences(user["candidate"])}
        return {"errors": min(len(reference ^ candidate), 99)}
    raise ValueError(f"unknown schema {title!r}")


def break_answer(answer: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The same answer less its first required key: valid JSON that violates the schema."""
    required = list(schema.get("required") or answer)
    return {k: v for k, v in answer.items() if k != required[0]} if required else {"unexpected": 1}


def schema_of(body: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of a chat body: vLLM's `structured_outputs` or OpenAI's `response_format`."""
    if "structured_outputs" in body:
        return body["structured_outputs"]["json"]
    return body["response_format"]["json_schema"]["schema"]


def completion(body: dict[str, Any], content: str, model: str,
               cached_tokens: int = 0) -> dict[str, Any]:
    """An OpenAI chat completion carrying `content`; tokens counted as characters/4."""
    prompt_tokens = sum(len(str(m.get("content", ""))) // 4 for m in body["messages"])
    return {
        "id": f"cmpl-fake-{time.time_ns():x}", "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", model),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content) // 4,
                  "total_tokens": prompt_tokens + len(content) // 4,
                  "prompt_tokens_details": {"cached_tokens": cached_tokens}},
    }


class PrefixCache:
    """vLLM-style prefix caching counted in characters/4: a prompt is cut into blocks, each
    named by the hash of the prompt up to its end; leading blocks seen before are hits."""

    def __init__(self) -> None:
        self._blocks: set[bytes] = set()
        self._lock = threading.Lock()
        self.queries = self.hits = 0

    def observe(self, messages: list[dict[str, Any]]) -> int:
        """Count one prompt; return its cached tokens."""
        prompt = "".join(f"<{m.get('role')}>{m.get('content')}" for m in messages).encode()
        running, hit_chars, leading = hashlib.sha256(), 0, True
        with self._lock:
            for start in range(0, len(prompt) - BLOCK_CHARS + 1, BLOCK_CHARS):
                running.update(prompt[start:start + BLOCK_CHARS])
                block = running.digest()
                if leading and block in self._blocks:
                    hit_chars += BLOCK_CHARS
                else:
                    leading = False
                    self._blocks.add(block)
            self.queries += len(prompt) // 4
            self.hits += hit_chars // 4
        return hit_chars // 4
