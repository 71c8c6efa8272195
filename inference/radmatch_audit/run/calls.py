"""One path for every judge call: prompt, cache, in-flight sharing, retries, validation.

An answer is validated once, by the stage's validation model, straight from its
JSON text (a stored answer too, when it is read back). A call that cannot succeed
raises `StageFailed`, whose `Failure` names the stage, the cause, the attempts and
the time spent; it is never turned into an empty answer.

Retries: a transient fault (connection, timeout, 429/5xx, a cut-off body) is retried
up to `retries` attempts in all, with exponential backoff, or after the server's
Retry-After when it asks for longer (capped at `max_wait_s`); an invalid answer is
retried once; any other judge error fails the stage at once.

At most `concurrency` calls are at the judge at once (a call waiting out its backoff
holds no slot), and a free slot goes to the oldest pair's call (`PairSpend.priority`);
once the run has read its input to the end, to the call with the most stages still to
follow it (`gate.CallGate.by_chain`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Optional, Sequence

from pydantic import BaseModel, ValidationError

from radmatch_audit.run.cache import AnswerCache, cache_key
from radmatch_audit.run.gate import CallGate
from radmatch_audit.judges.base import InvalidAnswerError, Judge, JudgeError, TransientJudgeError
from radmatch_audit.core.records import Failure
from radmatch_audit.stages.stage import JudgeStage

log = logging.getLogger(__name__)

INVALID_ANSWER_ATTEMPTS = 2


class StageFailed(Exception):
    """A stage could not get a valid answer; `failure` says why."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message())
        self.failure = failure


@dataclass
class RunStats:
    """Counts over an evaluator's runs, for progress and benchmarks."""

    pairs: int = 0
    failed: int = 0
    judge_calls: int = 0  # answers the judge gave (valid or not), retries included
    cached_calls: int = 0  # answers from the cache or from another pair's call
    started: float = field(default_factory=time.perf_counter)

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    @property
    def pairs_per_s(self) -> float:
        elapsed = self.elapsed_s
        return self.pairs / elapsed if elapsed > 0 else 0.0


@dataclass
class PairSpend:
    """What one pair spent on the judge, and its place in the queue for judge slots."""

    priority: float = 0.0  # lower is served first: the run loop numbers pairs as it opens them
    seconds: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    cached: int = 0
    unreported: int = 0  # calls whose server gave no readable token counts
    exemplars: dict[str, int] = field(default_factory=dict)


class JudgeCalls:
    """Asks one judge for stage answers, for every pair of a run."""

    def __init__(
        self,
        judge: Judge,
        *,
        cache: AnswerCache,
        retries: int = 3,
        backoff_s: float = 1.0,
        max_wait_s: float = 60.0,
        concurrency: int = 8,
        stats: Optional[RunStats] = None,
    ) -> None:
        self.judge = judge
        self.gate = CallGate(concurrency)
        self.cache = cache
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_wait_s = max_wait_s
        self.stats = stats or RunStats()
        # told each judge call's stage as it starts and ends (a progress bar's hook)
        self.on_call: Optional[Callable[[str, str], None]] = None

    async def ask(
        self,
        stage: JudgeStage,
        modality: str,
        user_input: dict[str, Any],
        spend: PairSpend,
        *,
        rows: Optional[Sequence[tuple[str, str]]] = None,
        sample: int = 0,
    ) -> BaseModel:
        """The stage's validated answer for `user_input`, from the cache or the judge.

        Everything sent and checked comes from `stage`: its prompt for `modality` (as many
        exemplars as the judge's context holds), its grammar and validator for the `rows`
        a grading call is sent, its token budget. `sample` k > 0 asks again for the k-th
        sample of the same call (`--samples`): its own cache entry, never shared with
        another sample's call.
        """
        started = time.perf_counter()
        prompt = stage.prompt(modality)
        schema, validator, max_tokens = stage.grammar(rows), stage.validator(rows), stage.max_tokens
        try:
            messages, exemplars = prompt.fit(self.judge, user_input, max_tokens)
        except JudgeError as exc:  # the context budget: retrying cannot help
            raise StageFailed(Failure(stage=stage.name, cause=str(exc))) from None
        spend.exemplars[stage.name] = exemplars
        # the fixed turns are settled by the prompt's version and the exemplars sent: the
        # key hashes those and the pair's message, not the turns themselves
        key = cache_key(
            model=self.judge.model,
            backend=self.judge.backend,
            settings=getattr(self.judge, "settings", None),  # temperature, thinking
            prompt_version=prompt.version,
            exemplars=exemplars,
            pair_message=messages[-1]["content"],
            schema=_schema_digest(schema),
            max_tokens=max_tokens,
            **({"sample": sample} if sample else {}),  # sample 0 is the one-sample run's entry
        )
        answer = self._stored(key, validator)
        owner = False
        if answer is None:
            (entry, answer), owner = await self.cache.shared(
                key,
                lambda: self._call(key, stage, messages, schema, validator, spend.priority),
            )
        spend.seconds[stage.name] = spend.seconds.get(stage.name, 0.0) + time.perf_counter() - started
        spend.calls += 1
        if owner:
            spend.prompt_tokens += entry["usage"]["prompt_tokens"]
            spend.completion_tokens += entry["usage"]["completion_tokens"]
            spend.unreported += not entry["usage"].get("reported", True)
        else:  # answered from the store or by a call another pair made
            spend.cached += 1
            self.stats.cached_calls += 1
        return answer

    def _stored(self, key: str, validator: type[BaseModel]) -> Optional[BaseModel]:
        entry = self.cache.get(key)
        if entry is None:
            return None
        try:  # a stored answer is validated like a fresh one
            return validator.model_validate_json(entry["text"])
        except (ValidationError, KeyError, TypeError):
            self.cache.discard(key)
            return None

    async def _call(
        self,
        key: str,
        stage: JudgeStage,
        messages: list,
        schema: type[BaseModel],
        validator: type[BaseModel],
        priority: float,
    ) -> tuple[dict[str, Any], BaseModel]:
        started = time.perf_counter()
        attempts = invalid = 0
        name = stage.name

        def failed(cause: str) -> StageFailed:
            took = round(time.perf_counter() - started, 3)
            return StageFailed(Failure(stage=name, cause=cause, attempts=attempts, elapsed_s=took))

        while True:
            attempts += 1
            try:
                await self.gate.acquire(priority, stage.chain)
                try:
                    called = time.perf_counter()
                    self._tell(name, "running")
                    result = await self.judge.generate(messages, schema, max_tokens=stage.max_tokens)
                    self._tell(name, f"done in {time.perf_counter() - called:.0f} s")
                finally:
                    self.gate.release()
                self.stats.judge_calls += 1
                answer = validator.model_validate_json(result.text)
            except (ValidationError, InvalidAnswerError) as exc:
                invalid += 1
                cause = _invalid_cause(name, exc)
                log.info("%s: invalid answer (attempt %d)", name, attempts)  # no report text
                if invalid >= INVALID_ANSWER_ATTEMPTS:
                    raise failed(cause) from None
                continue
            except TransientJudgeError as exc:
                if attempts >= self.retries:
                    raise failed(str(exc)) from None
                delay = self._delay(attempts, exc.retry_after)
                log.info("%s: %s; retry %d in %.1f s", name, type(exc).__name__, attempts, delay)
                await asyncio.sleep(delay)
                continue
            except JudgeError as exc:
                raise failed(str(exc)) from None
            entry = {"text": result.text, "usage": {
                "prompt_tokens": result.usage.prompt_tokens,
                "completion_tokens": result.usage.completion_tokens,
                **({} if result.usage.reported else {"reported": False}),
            }}
            self.cache.put(key, entry)
            return entry, answer

    def _tell(self, stage: str, event: str) -> None:
        if self.on_call is not None:
            self.on_call(stage, event)

    def _delay(self, attempt: int, retry_after: Optional[float]) -> float:
        backoff = self.backoff_s * 2 ** (attempt - 1) * (1 + random.random() / 4)
        return min(max(backoff, retry_after or 0.0), self.max_wait_s)


@lru_cache(maxsize=512)
def _schema_digest(schema: type[BaseModel]) -> str:
    canonical = json.dumps(schema.model_json_schema(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _invalid_cause(stage: str, exc: Exception) -> str:
    if not isinstance(exc, ValidationError):
        return str(exc)
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        return (
            f"the {stage} answer is not valid JSON (a truncated answer means its token "
            "budget was too small)"
        )
    if first["type"] in ("too_short", "too_long") and first["loc"] == ("grades",):
        return f"the grade answer does not have one entry per matched row ({first['msg']})"
    if first["type"] == "value_error" and not first["loc"]:  # the rows check of a grading answer
        return str(first["ctx"]["error"])
    where = ".".join(str(p) for p in first["loc"]) or "(answer)"
    return f"the {stage} answer does not fit its schema ({where}: {first['msg']})"
