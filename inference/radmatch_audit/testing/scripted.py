"""In-process judges for orchestration tests: the toy judge without HTTP, and a recorder.

`ScriptedJudge` answers every stage as the fake server does (radmatch_audit.testing.toy_judge:
one finding per sentence, identical sentences match, no grading errors), so that unit
tests and HTTP tests share one scripted behaviour. A report containing `FAIL` makes
its extraction fail. Both judges record `(stage, user input)` of every call.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from radmatch_audit.judges.base import JudgeError, JudgeResult, Message, Usage, estimate_tokens
from radmatch_audit.testing.toy_judge import toy_answer

FAIL_MARKER = "FAIL"
_STAGE_OF_TITLE = {
    "ExtractionAnswer": "extract",
    "MatchingAnswer": "match",
    "GradingAnswer": "grade",
    "AdjudicationAnswer": "adjudicate",
}


def stage_of(schema: type[BaseModel]) -> str:
    return _STAGE_OF_TITLE[schema.__name__]


class ScriptedJudge:
    """A deterministic judge in this process (see the module docstring)."""

    backend = "scripted"
    model = "scripted-judge"
    context_window = None

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.closed = False

    async def generate(self, messages: list[Message], schema: type[BaseModel], *, max_tokens: int) -> JudgeResult:
        user = json.loads(messages[-1]["content"])
        stage = stage_of(schema)
        self.calls.append((stage, user))
        if stage == "extract" and FAIL_MARKER in user["report"]:
            raise JudgeError("scripted failure")
        answer = toy_answer(schema.__name__, user, schema.model_json_schema())
        return JudgeResult(text=json.dumps(answer), usage=Usage(prompt_tokens=10, completion_tokens=5))

    def count_tokens(self, messages: list[Message]) -> int:
        return estimate_tokens(messages)

    async def check(self) -> None:
        return None

    async def aclose(self) -> None:
        self.closed = True


class RecordingJudge:
    """Wraps a real judge, recording (stage, user input) of every call that reaches it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.backend, self.model, self.context_window = inner.backend, inner.model, inner.context_window
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def generate(self, messages: list[Message], schema: type[BaseModel], *, max_tokens: int) -> JudgeResult:
        self.calls.append((stage_of(schema), json.loads(messages[-1]["content"])))
        return await self.inner.generate(messages, schema, max_tokens=max_tokens)

    def count_tokens(self, messages: list[Message]) -> int:
        return self.inner.count_tokens(messages)

    async def check(self) -> None:
        await self.inner.check()

    async def calibrate(self, messages: list[Message]) -> None:
        calibrate = getattr(self.inner, "calibrate", None)
        if calibrate is not None:
            await calibrate(messages)

    async def aclose(self) -> None:
        return None  # the inner judge belongs to whoever made it
