"""The paper's single-call baselines as judges that write records (docs/agreement.md).

- `count`: the judge answers `{"errors": N}`, a bare integer of clinically significant
  errors;
- `enumerate`: the judge answers `{"errors": [{"description": ...}, ...]}`, one entry
  per error, and the count is the length of the list.

Both answers are schema-constrained like RadMatch's stages and go through the same
call path (`radmatch_audit.calls.JudgeCalls`: answer cache, in-flight sharing, retries,
validation). Their instructions are data: `prompts/baselines/<method>.md`. A baseline
record is a JSON line with `"record_type": "baseline"`, read by `radmatch-audit agreement`;
it holds no finding-level structure, which is the point of the comparison.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from radmatch_audit.control_strings import neutralise_markers
from radmatch_audit.pipeline import stream
from radmatch_audit.records import Failure, PairInput

if TYPE_CHECKING:
    from radmatch_audit.calls import PairSpend
    from radmatch_audit.judges.base import Judge

log = logging.getLogger(__name__)

METHODS = ("count", "enumerate")
RECORD_TYPE = "baseline"
RECORD_VERSION = 1
MAX_COUNT = 99  # the count grammar admits 0..MAX_COUNT
# (list cap, description cap, answer tokens) for a served judge and for a small model
SERVER_CAPS = (60, 400, 8192)
SMALL_CAPS = (4, 80, 300)  # ~35 tokens an entry: a small model on a CPU fills the list
COUNT_MAX_TOKENS = 32

CountValue = Literal[tuple(range(MAX_COUNT + 1))]  # an enum: every grammar backend bounds it


class CountAnswer(BaseModel):
    """`count`: the number of clinically significant errors."""

    model_config = ConfigDict(extra="forbid")
    errors: CountValue  # type: ignore[valid-type]


class ListedError(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str


def enumerate_model(max_items: Optional[int], max_chars: Optional[int]) -> type[BaseModel]:
    """`enumerate`'s answer model with the given caps (None: uncapped)."""

    class Listed(BaseModel):
        model_config = ConfigDict(extra="forbid")
        description: str = Field(max_length=max_chars) if max_chars else Field()

    class EnumerateAnswer(BaseModel):
        model_config = ConfigDict(extra="forbid")
        errors: list[Listed] = Field(max_length=max_items) if max_items else Field()

    return EnumerateAnswer


def load_prompt(method: str) -> str:
    """The instructions of a baseline (prompts/baselines/<method>.md)."""
    if method not in METHODS:
        raise ValueError(f"unknown baseline method {method!r}; expected one of {list(METHODS)}")
    return resources.files("radmatch_audit.prompts").joinpath("baselines", f"{method}.md").read_text(encoding="utf-8")


def _prompt_version(method: str, schema: type[BaseModel]) -> str:
    payload = json.dumps({"instructions": load_prompt(method), "schema": schema.model_json_schema()},
                         sort_keys=True, separators=(",", ":"))
    return "baseline-v1-" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]


class Baseline:
    """Runs one single-call baseline over pairs, through one judge.

    `small_model` sets the caps a small model needs (a short list, short descriptions,
    a small token budget); a capable served judge runs uncapped.
    """

    def __init__(
        self,
        judge: "Judge",
        method: str,
        *,
        cache_dir: Optional[Path] = None,
        small_model: bool = False,
        retries: int = 3,
        concurrency: int = 1,
        close_judge: bool = True,
    ) -> None:
        from radmatch_audit.cache import AnswerCache
        from radmatch_audit.calls import JudgeCalls
        from radmatch_audit.loop import LoopThread
        from radmatch_audit.schemas import SERVER_LIMITS

        self.method = method
        self.instructions = load_prompt(method)
        items, chars, tokens = SMALL_CAPS if small_model else SERVER_CAPS
        if method == "count":
            self.schema, self.max_tokens = CountAnswer, COUNT_MAX_TOKENS
        else:
            self.schema, self.max_tokens = enumerate_model(items, chars if small_model else None), tokens
        self.version = _prompt_version(method, self.schema)
        self.judge = judge
        self.concurrency = max(1, concurrency)
        # JudgeCalls' own path (cache, sharing, retries, validation) with our messages
        self.calls = JudgeCalls(judge, limits=SERVER_LIMITS, max_tokens={}, cache=AnswerCache(cache_dir),
                                retries=retries, concurrency=self.concurrency)
        self._loop = LoopThread(f"radmatch-{method}")
        self._close_judge = close_judge

    def close(self) -> None:
        try:
            if self._close_judge:
                self._loop.run(self.judge.aclose())
        finally:
            self._loop.close()
            self.calls.cache.close()

    def __enter__(self) -> "Baseline":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self) -> None:
        self._loop.run(self.judge.check())

    def messages(self, pair: PairInput) -> list[dict[str, str]]:
        user: dict[str, Any] = {"reference": pair.reference, "candidate": pair.candidate}
        if pair.indication and pair.indication.strip():
            user["indication"] = pair.indication.strip()
        return [
            {"role": "system", "content": self.instructions},
            {"role": "user", "content": neutralise_markers(json.dumps(user, ensure_ascii=False))[0]},
        ]

    async def _ask(self, pair: PairInput, spend: "PairSpend") -> BaseModel:
        from radmatch_audit.calls import StageFailed

        messages = self.messages(pair)
        stage = f"baseline_{self.method}"
        window = self.judge.context_window
        if window is not None:
            needed = self.judge.count_tokens(messages) + self.max_tokens
            if needed > window:
                raise StageFailed(Failure(stage=stage, cause=(
                    f"the pair needs {needed} tokens, more than the judge's context of {window}")))
        return await self.calls.call(
            stage, messages, self.schema, self.schema, self.max_tokens, spend,
            prompt_version=self.version,
        )

    async def _one(
        self, pair_id: str, pair: PairInput, source: Optional[str], priority: int = 0
    ) -> dict[str, Any]:
        from radmatch_audit.calls import PairSpend, StageFailed

        record = base_record(pair_id, pair, self.method, source)
        record["judge"] = {"backend": self.judge.backend, "model": self.judge.model,
                           "prompt_version": self.version,
                           "loaded_model": getattr(self.judge, "loaded_model", None),
                           "max_model_len": getattr(self.judge, "max_model_len", None)}
        spend, started = PairSpend(priority=priority), time.perf_counter()
        try:
            if not pair.reference.strip():
                raise StageFailed(Failure(stage="input", cause="the reference report is empty"))
            answer = await self._ask(pair, spend)
            record["answer"] = answer.model_dump()
            record["errors"] = answer.errors if self.method == "count" else len(answer.errors)
        except StageFailed as exc:
            record["failure"] = exc.failure.model_dump()
            record["error"] = exc.failure.message()
            log.warning("pair %s failed (%s)", pair_id, exc.failure.stage)  # no report text
        except Exception as exc:  # a bug must not take the other pairs down
            failure = Failure(stage="internal", cause=f"internal error: {type(exc).__name__}")
            record["failure"], record["error"] = failure.model_dump(), failure.message()
        record["timings_s"] = {"total": round(time.perf_counter() - started, 4)}
        record["usage"] = {"prompt_tokens": spend.prompt_tokens, "completion_tokens": spend.completion_tokens,
                           "judge_calls": spend.calls - spend.cached, "cached_calls": spend.cached}
        return record

    def run(self, jobs: Iterable[tuple[str, PairInput, Optional[str]]],
            on_record: Callable[[dict[str, Any]], None]) -> None:
        """Run every (pair_id, pair, source) job; `on_record` gets each record as it ends."""

        async def one(job: tuple[str, PairInput, Optional[str]], position: int) -> None:
            on_record(await self._one(*job, priority=position))

        self._loop.run(stream(jobs, one, self.concurrency))


def base_record(pair_id: str, pair: PairInput, method: str, source: Optional[str] = None) -> dict[str, Any]:
    """A baseline record before its answer: the documented keys, in order."""
    return {
        "record_type": RECORD_TYPE, "schema_version": RECORD_VERSION, "method": method,
        "pair_id": pair_id, "study_id": pair.study_id, "modality": pair.modality, "source": source,
        "reference": pair.reference, "candidate": pair.candidate, "indication": pair.indication,
        "judge": {}, "answer": None, "errors": None, "error": None, "failure": None,
    }
