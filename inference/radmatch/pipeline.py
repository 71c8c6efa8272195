"""The judge pipeline: indication, extract, match, grade, then deterministic scoring.

Pairs run concurrently (bounded); the stages of one pair run in order. Every judge
answer goes through one path (`_ask`): cache, in-flight sharing, retries with backoff,
per-call timeout, validation by the decoding model. A pair whose judge fails gets a
record with `error` and no scores, never zero errors.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Iterable, Optional

from pydantic import BaseModel, ValidationError

from radmatch.cache import AnswerCache, cache_key
from radmatch.config import SERVER_MAX_TOKENS, JudgeConfig
from radmatch.decoding import SERVER_LIMITS, SMALL_MODEL_LIMITS, Limits, answer_models
from radmatch.judges.base import InvalidAnswerError, Judge, JudgeError, TransientJudgeError, Usage
from radmatch.prompting import finding_view, fit_messages, has_indication_header
from radmatch.prompts import ANSWER_MODELS, MODALITIES, prompt_version
from radmatch.recompute import score_record
from radmatch.records import Record, Stages
from radmatch.schemas import (
    ExtractionAnswer,
    GradingAnswer,
    GradingStage,
    MatchingAnswer,
    number_findings,
)
from radmatch.scoring.repair import repair_matching

log = logging.getLogger(__name__)

STAGES_IN_ORDER = ("indication", "extract", "match", "grade")


@dataclass
class PairInput:
    """One pair to evaluate. `pair_id` defaults to the pair's position."""

    reference: str
    candidate: str
    pair_id: Optional[str] = None
    study_id: Optional[str] = None
    modality: Optional[str] = None
    indication: Optional[str] = None

    def check(self, position: int) -> None:
        name = self.pair_id or f"#{position}"
        for field_name in ("reference", "candidate"):
            value = getattr(self, field_name)
            if not isinstance(value, str):
                raise ValueError(
                    f"pair {name}: {field_name} must be a string, got {type(value).__name__}"
                )
        if self.indication is not None and not isinstance(self.indication, str):
            raise ValueError(f"pair {name}: indication must be a string or null")
        if self.modality is not None and self.modality not in MODALITIES:
            raise ValueError(
                f"pair {name}: modality must be one of {list(MODALITIES)}; got {self.modality!r}"
            )


@dataclass
class RunStats:
    """Counts over one evaluation run, for progress and benchmarks."""

    pairs: int = 0
    failed: int = 0
    judge_calls: int = 0
    cached_calls: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def pairs_per_s(self) -> float:
        elapsed = time.perf_counter() - self.started
        return self.pairs / elapsed if elapsed > 0 else 0.0


class PairFailed(Exception):
    def __init__(self, stage: str, cause: Exception) -> None:
        super().__init__(f"{stage}: {cause}")
        self.stage = stage


@dataclass
class _Call:
    """What one pair spent on the judge, per stage."""

    timings: dict[str, float] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    calls: int = 0
    cached: int = 0
    exemplars: dict[str, int] = field(default_factory=dict)


class Evaluator:
    """Runs pairs through one judge. Reuse it: its cache and loaded model live across runs."""

    def __init__(
        self,
        judge: Judge,
        *,
        modality: str = "chest_xray",
        concurrency: int = 8,
        cache_dir=None,
        limits: Optional[Limits] = None,
        max_tokens: Optional[dict[str, int]] = None,
        retries: int = 3,
        timeout_s: float = 300.0,
        backoff_s: float = 1.0,
    ) -> None:
        self.judge = judge
        self.modality = modality
        self.concurrency = concurrency
        self.cache = AnswerCache(cache_dir)
        self.limits = limits or SERVER_LIMITS
        self.models = answer_models(self.limits)
        self.max_tokens = max_tokens or dict(SERVER_MAX_TOKENS)
        self.retries = retries
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.stats = RunStats()
        self._versions: dict[tuple[str, str], str] = {}

    @classmethod
    def from_config(cls, config: JudgeConfig, judge: Optional[Judge] = None) -> "Evaluator":
        return cls(
            judge or config.build_judge(),
            modality=config.modality,
            concurrency=config.concurrency,
            cache_dir=config.answer_cache_dir(),
            limits=SMALL_MODEL_LIMITS if config.is_small_local_model else SERVER_LIMITS,
            max_tokens=config.stage_max_tokens(),
            retries=config.retries,
            timeout_s=config.timeout_s,
        )

    # ------------------------------------------------------------------ public API

    async def aevaluate(
        self,
        pairs: Iterable[PairInput],
        *,
        on_record: Optional[Callable[[Record], None]] = None,
    ) -> list[Record]:
        """Evaluate pairs; records come back in input order, `on_record` sees them as they finish."""
        pairs = list(pairs)
        for position, pair in enumerate(pairs):
            pair.check(position)
        seen: set[str] = set()
        for position, pair in enumerate(pairs):
            pair.pair_id = pair.pair_id or str(position)
            if pair.pair_id in seen:
                raise ValueError(f"pair {pair.pair_id}: pair_id occurs more than once in this run")
            seen.add(pair.pair_id)
        limiter = asyncio.Semaphore(self.concurrency)

        async def run(pair: PairInput) -> Record:
            async with limiter:
                record = await self._evaluate_pair(pair)
            self.stats.pairs += 1
            self.stats.failed += record.error is not None
            if on_record is not None:
                on_record(record)
            return record

        return list(await asyncio.gather(*(run(p) for p in pairs)))

    def evaluate(self, pairs: Iterable[PairInput], **kwargs: Any) -> list[Record]:
        """Blocking form of `aevaluate`; works inside a running event loop (notebooks) too."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.aevaluate(pairs, **kwargs))
        result: dict[str, Any] = {}

        def worker() -> None:
            try:
                result["records"] = asyncio.run(self.aevaluate(pairs, **kwargs))
            except BaseException as exc:  # re-raised in the caller's thread
                result["error"] = exc

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        if "error" in result:
            raise result["error"]
        return result["records"]

    def _prompt_version(self, stage: str, modality: str) -> str:
        """Hashing reads the exemplar files: once per stage and modality per evaluator."""
        key = (stage, modality)
        if key not in self._versions:
            self._versions[key] = prompt_version(stage, modality)
        return self._versions[key]

    def judge_info(self, modality: str) -> dict[str, Any]:
        return {
            "backend": self.judge.backend,
            "model": self.judge.model,
            "prompt_version": {s: self._prompt_version(s, modality) for s in STAGES_IN_ORDER},
            "fewshot_set": modality,
        }

    # ------------------------------------------------------------------ one pair

    async def _evaluate_pair(self, pair: PairInput) -> Record:
        modality = pair.modality or self.modality
        record = Record(
            pair_id=pair.pair_id,
            study_id=pair.study_id,
            modality=modality,
            reference=pair.reference,
            candidate=pair.candidate,
            indication=pair.indication,
            judge=self.judge_info(modality),
        )
        spent = _Call()
        started = time.perf_counter()
        try:
            await self._run_stages(pair, modality, record, spent)
            record = score_record(record)
        except PairFailed as exc:
            record.error = str(exc)
            log.warning("pair %s failed at %s", pair.pair_id, exc.stage)  # no report text
        except ValueError as exc:  # scoring rejected the stages
            record.error = f"score: {exc}"
        except Exception as exc:  # a bug must not take the other pairs down with it
            record.error = f"internal error: {type(exc).__name__}"
            log.error(
                "pair %s: internal error %s", pair.pair_id, type(exc).__name__,
                exc_info=log.isEnabledFor(logging.DEBUG),  # tracebacks may quote report text
            )
        spent.timings["total"] = time.perf_counter() - started
        record.timings_s = {k: round(v, 4) for k, v in spent.timings.items()}
        record.usage = {
            "prompt_tokens": spent.usage.prompt_tokens,
            "completion_tokens": spent.usage.completion_tokens,
            "cached": spent.calls > 0 and spent.cached == spent.calls,
            "judge_calls": spent.calls - spent.cached,
            "cached_calls": spent.cached,
        }
        record.judge["exemplars_used"] = spent.exemplars
        return record

    async def _run_stages(self, pair: PairInput, modality: str, record: Record, spent: _Call) -> None:
        stages: Stages = record.stages
        indication = await self._indication(pair, modality, spent)
        stages.indication = indication

        reference_answer, candidate_answer = await asyncio.gather(
            self._extract(pair.reference, indication, modality, spent),
            self._extract(pair.candidate, indication, modality, spent),
        )
        stages.reference_findings = number_findings(reference_answer.findings, "gt")
        stages.candidate_findings = number_findings(candidate_answer.findings, "p")
        for side in ("reference", "candidate"):
            found = getattr(stages, f"{side}_findings")
            if self.limits.findings and len(found) >= self.limits.findings:
                record.flags.append(f"{side}_findings reached the cap of {self.limits.findings}")

        gt, pred = stages.reference_findings, stages.candidate_findings
        if not gt or not pred:  # nothing to align: every finding is unmatched, no call
            stages.matching = MatchingAnswer(
                matches=[], unmatched_pred=[f.id for f in pred], unmatched_gt=[f.id for f in gt]
            )
            record.flags.append("matching: no judge call, one side has no findings")
        else:
            match_input = {
                "indication": indication,
                "gt_findings": [finding_view(f) for f in gt],
                "pred_findings": [finding_view(f) for f in pred],
            }
            answer = await self._ask("match", modality, match_input, spent)
            stages.matching = MatchingAnswer.model_validate(answer.model_dump())
            if self.limits.rows and len(stages.matching.matches) >= self.limits.rows:
                record.flags.append(f"matching reached the cap of {self.limits.rows} rows")

        repaired = repair_matching(stages.matching, [f.id for f in pred], [f.id for f in gt])
        rows = [(r.pred_id, r.gt_id) for r in repaired.rows if r.match_scope != "generic"]
        if not rows:
            stages.grading = GradingStage()
            return
        by_id = {f.id: f for f in gt + pred}
        grade_input = {
            "indication": indication,
            "pairs": [
                {"pred_finding": finding_view(by_id[p]), "gt_finding": finding_view(by_id[g])}
                for p, g in rows
            ],
        }
        answer = await self._ask("grade", modality, grade_input, spent, expect_length=len(rows))
        grading = GradingAnswer.model_validate(answer.model_dump())
        stages.grading = GradingStage(
            pairs=rows, errors_per_match=[[e.model_dump() for e in errs] for errs in grading.errors_per_match]
        )

    async def _extract(
        self, report: str, indication: Optional[str], modality: str, spent: _Call
    ) -> ExtractionAnswer:
        if not report.strip():  # an empty report states nothing: no call
            return ExtractionAnswer(findings=[])
        answer = await self._ask("extract", modality, {"report": report, "indication": indication}, spent)
        return ExtractionAnswer.model_validate(answer.model_dump())

    async def _indication(self, pair: PairInput, modality: str, spent: _Call) -> Optional[str]:
        if pair.indication is not None:
            return pair.indication.strip() or None
        if not has_indication_header(pair.reference):
            return None
        answer = await self._ask("indication", modality, {"report": pair.reference}, spent)
        return answer.indication.strip() or None

    # ------------------------------------------------------------------ one judge call

    async def _ask(
        self,
        stage: str,
        modality: str,
        user_input: dict[str, Any],
        spent: _Call,
        *,
        expect_length: Optional[int] = None,
    ) -> BaseModel:
        schema = self.models.for_stage(stage, rows=expect_length)
        max_tokens = self.max_tokens[stage]
        try:
            messages, n_exemplars = fit_messages(self.judge, stage, modality, user_input, max_tokens)
        except JudgeError as exc:
            raise PairFailed(stage, exc) from exc
        spent.exemplars[stage] = n_exemplars
        key = cache_key(
            model=self.judge.model,
            backend=self.judge.backend,
            prompt_version=self._prompt_version(stage, modality),
            messages=messages,
            schema=_schema_json(schema),
            max_tokens=max_tokens,
        )
        started = time.perf_counter()
        entry = self.cache.get(key)
        if entry is not None:
            try:  # a stored answer is re-validated like a fresh one
                _validate(schema, entry["text"], stage, expect_length)
            except (InvalidAnswerError, KeyError, TypeError):
                self.cache.discard(key)
                entry = None
        owner = False
        if entry is None:
            try:
                entry, owner = await self.cache.shared(
                    key, lambda: self._call_judge(stage, key, messages, schema, max_tokens, expect_length)
                )
            except JudgeError as exc:
                raise PairFailed(stage, exc) from exc
        spent.timings[stage] = spent.timings.get(stage, 0.0) + time.perf_counter() - started
        spent.calls += 1
        if owner:
            spent.usage.add(Usage(**entry["usage"]))
        else:  # answered from the store or by a call another pair made
            spent.cached += 1
            self.stats.cached_calls += 1
        return schema.model_validate_json(entry["text"])

    async def _call_judge(
        self,
        stage: str,
        key: str,
        messages: list,
        schema: type[BaseModel],
        max_tokens: int,
        expect_length: Optional[int],
    ) -> dict[str, Any]:
        """Call the judge with retries; return a validated cache entry and store it."""
        invalid_tries = 0
        attempt = 0
        while True:
            attempt += 1
            try:
                result = await asyncio.wait_for(
                    self.judge.generate(messages, schema, max_tokens=max_tokens), self.timeout_s
                )
                self.stats.judge_calls += 1
                _validate(schema, result.text, stage, expect_length)
            except InvalidAnswerError:
                invalid_tries += 1
                if invalid_tries >= 2:  # one retry, then the pair fails
                    raise
                continue
            except (TransientJudgeError, asyncio.TimeoutError) as exc:
                if attempt >= self.retries:
                    raise TransientJudgeError(
                        f"gave up after {attempt} attempts: {exc or 'timed out'}"
                    ) from exc
                delay = self.backoff_s * 2 ** (attempt - 1) * (1 + random.random() / 4)
                log.info("%s call failed (%s); retry %d in %.1f s", stage, type(exc).__name__, attempt, delay)
                await asyncio.sleep(delay)
                continue
            entry = {"text": result.text, "usage": {
                "prompt_tokens": result.usage.prompt_tokens,
                "completion_tokens": result.usage.completion_tokens,
            }}
            self.cache.put(key, entry)
            return entry

    async def aclose(self) -> None:
        await self.judge.aclose()


@lru_cache(maxsize=512)
def _schema_json(schema: type[BaseModel]) -> dict[str, Any]:
    return schema.model_json_schema()


def _validate(schema: type[BaseModel], text: str, stage: str, expect_length: Optional[int]) -> None:
    """Raise InvalidAnswerError, saying what is wrong, unless `text` is a valid answer."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InvalidAnswerError(
            f"the {stage} answer is not valid JSON (a truncated answer means its token budget "
            "was too small)"
        ) from exc
    if expect_length is not None and isinstance(data, dict):
        got = data.get("errors_per_match")
        if isinstance(got, list) and len(got) != expect_length:
            raise InvalidAnswerError(
                f"the grade answer has {len(got)} entries for {expect_length} matched rows"
            )
    # the decoding schema, then the canonical caps (checked here when the grammar does not)
    for model in (schema, ANSWER_MODELS[stage]):
        try:
            model.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(answer)"
            raise InvalidAnswerError(
                f"the {stage} answer does not fit its schema ({where}: {first['msg']})"
            ) from exc


def evaluate_pairs(
    pairs: Iterable[PairInput], config: Optional[JudgeConfig] = None, **kwargs: Any
) -> list[Record]:
    """One-shot convenience: build the judge from config (or RADMATCH_* variables), evaluate."""
    evaluator = Evaluator.from_config(config or JudgeConfig.from_env())
    return evaluator.evaluate(pairs, **kwargs)
