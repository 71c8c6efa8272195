"""What evaluating one pair is, per method: RadMatch's stages, or a baseline's single call.

The runner (`radmatch_audit.run.pipeline.Evaluator`) owns the loop, the judge and the answer
cache, and hands each pair to its method with the call path (`calls.JudgeCalls`). A
method returns the pair's record, failed or not: a judge that fails gives a record with
`error` and `failure` and no count, never zero errors.

- `RadMatch`: indication, extract, match, repair, grade (`stages.run_stages`), `samples`
  times when asked, then the scores (`scoring.score_record`), then the error
  adjudication of the scored units (`stages.adjudication`) -> `records.Record`;
- `Baseline`: the paper's count or enumerate, one call -> `records.BaselineRecord`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from typing import Any, Callable, Optional, Union

from radmatch_audit.run.calls import JudgeCalls, PairSpend, StageFailed
from radmatch_audit.core.control_strings import control_tokens
from radmatch_audit.judges.base import Judge
from radmatch_audit.core.records import (
    BaselineJudge, BaselineRecord, BaselineTimings, BaselineUsage, Failure, JudgeInfo, PairInput,
    Record, Sample, Stages, Timings, Usage,
)
from radmatch_audit.core.schemas import SERVER_LIMITS, SMALL_MODEL_LIMITS, Limits
from radmatch_audit.scoring import score_record
from radmatch_audit.stages import JudgeStage, pair_stages, run_stages
from radmatch_audit.stages.adjudication import adjudicate, adjudication_failed
from radmatch_audit.stages.baselines import METHODS as BASELINES
from radmatch_audit.stages.baselines import baseline_stage
from radmatch_audit.core.vocabulary import STAGES

log = logging.getLogger(__name__)

METHODS = ("radmatch", *BASELINES)
AnyRecord = Union[Record, BaselineRecord]


class Method(ABC):
    """One way of evaluating a pair with a judge."""

    name: str
    stages: dict[str, JudgeStage]  # the judge calls it makes, by name

    @abstractmethod
    async def evaluate(
        self, calls: JudgeCalls, pair_id: str, pair: PairInput, source: Optional[str],
        modality: str, priority: int = 0,
    ) -> AnyRecord:
        """The pair's record; `priority` orders its judge calls (lower first)."""


def make_method(
    name: str, *, limits: Limits = SERVER_LIMITS, max_tokens: Optional[dict[str, int]] = None,
    samples: int = 1, adjudication: bool = True,
) -> Method:
    """The method called `name` ("radmatch", "count", "enumerate") under `limits`; a
    baseline takes a small model's caps when `limits` are SMALL_MODEL_LIMITS.
    `adjudication=False` leaves RadMatch's error adjudication out."""
    if name == "radmatch":
        return RadMatch(limits, max_tokens, samples, adjudication)
    if name in BASELINES:
        if samples != 1:
            raise ValueError(f"the {name} baseline makes one call per pair; samples must be 1, got {samples}")
        return Baseline(name, small_model=limits == SMALL_MODEL_LIMITS)
    raise ValueError(f"The 'method' parameter must be one of {list(METHODS)}; got {name!r}")


class RadMatch(Method):
    """RadMatch's stages over a pair, `samples` times, then its scores, then the error
    adjudication of the first sample's units (unless `adjudication=False`)."""

    name = "radmatch"

    def __init__(self, limits: Limits = SERVER_LIMITS, max_tokens: Optional[dict[str, int]] = None,
                 samples: int = 1, adjudication: bool = True) -> None:
        self.limits = limits
        self.samples = samples
        self.adjudication = adjudication
        self.stages = pair_stages(limits, max_tokens, adjudication)

    def judge_info(self, judge: Judge, modality: str) -> JudgeInfo:
        return JudgeInfo(
            backend=judge.backend,
            model=judge.model,
            prompt_version={name: stage.prompt(modality).version for name, stage in self.stages.items()},
            fewshot_set=modality,
            # what the pre-flight read from the server (vLLM's `root`, its context)
            loaded_model=getattr(judge, "loaded_model", None),
            max_model_len=getattr(judge, "max_model_len", None),
        )

    async def evaluate(
        self, calls: JudgeCalls, pair_id: str, pair: PairInput, source: Optional[str],
        modality: str, priority: int = 0,
    ) -> Record:
        record = Record(
            pair_id=pair_id, study_id=pair.study_id, modality=modality, source=source,
            reference=pair.reference, candidate=pair.candidate, indication=pair.indication,
            judge=self.judge_info(calls.judge, modality),
        )
        if not pair.reference.strip():
            record.fail(Failure(stage="input", cause="the reference report is empty"))
            return record
        spend = PairSpend(priority=priority)
        started = time.perf_counter()

        def asker(sample: int) -> Callable[..., Any]:
            def ask(stage: str, user_input: dict[str, Any], rows: Optional[list[tuple[str, str]]] = None) -> Any:
                return calls.ask(self.stages[stage], modality, user_input, spend, rows=rows, sample=sample)
            return ask

        tokens = control_tokens(calls.judge)
        try:
            if self.samples == 1:
                await run_stages(record, asker(0), self.limits, tokens)
            else:
                await self._run_samples(record, asker, tokens)
            record = score_record(record)
        except Exception as exc:
            record.fail(failure_of(exc, pair_id))
        if self.adjudication and record.error is None:
            record = await self._adjudicate(record, asker(0))
        if record.error is not None and record.samples is not None:
            try:  # the pair failed; the samples that ran are scored all the same
                record = score_record(record)
            except ValueError:
                pass
        record.timings_s = Timings(
            **{stage: round(spend.seconds.get(stage, 0.0), 4) for stage in STAGES},
            total=round(time.perf_counter() - started, 4),
        )
        record.usage = Usage(cached=spend.calls > 0 and spend.cached == spend.calls,
                             unreported_calls=spend.unreported, **_counts(spend))
        record.judge.exemplars_used = spend.exemplars
        return record

    async def _adjudicate(self, record: Record, ask: Callable[..., Any]) -> Record:
        """The record with its error adjudication, re-scored; a failure of this stage is
        kept in the stage and flagged, and the pair's other scores stand."""
        try:
            record.stages.adjudication = await adjudicate(record, ask)
        except Exception as exc:
            failure = failure_of(exc, record.pair_id)
            record.stages.adjudication = adjudication_failed(record, failure.message())
            record.flags.append(f"adjudication failed, significant_errors is null: {failure.message()}")
        return score_record(record)

    async def _run_samples(self, record: Record, asker: Callable[[int], Any], tokens: tuple[str, ...]) -> None:
        """Run the stages `samples` times at once: sample 0 into the record, the rest beside it.

        A failure of sample 0 fails the pair (after the other samples are stored); a
        failure of another sample is kept in that sample.
        """
        first, *others = await asyncio.gather(
            run_stages(record, asker(0), self.limits, tokens),
            *(_sample(record, k, asker(k), self.limits, tokens) for k in range(1, self.samples)),
            return_exceptions=True,
        )
        record.samples = others
        if isinstance(first, BaseException):
            raise first


async def _sample(
    record: Record, index: int, ask: Callable[..., Any], limits: Limits, tokens: tuple[str, ...]
) -> Sample:
    """Sample `index` of a pair's stages; its failure is kept in the sample, not raised."""
    scratch = record.model_copy(update={"stages": Stages(), "flags": []})
    sample = Sample(index=index, stages=scratch.stages)
    try:
        await run_stages(scratch, ask, limits, tokens)
    except StageFailed as exc:
        sample.failure, sample.error = exc.failure, exc.failure.message()
    except Exception as exc:  # a bug in one sample must not take the pair down
        sample.failure = Failure(stage="internal", cause=f"internal error: {type(exc).__name__}")
        sample.error = sample.failure.message()
    return sample


class Baseline(Method):
    """A single-call baseline: the judge's count of clinically significant errors, or its list.

    `small_model` sets the caps a small model needs (a short list, short descriptions,
    a small token budget); a capable served judge runs uncapped.
    """

    def __init__(self, name: str, small_model: bool = False) -> None:
        self.name = name
        self.stage = baseline_stage(name, small_model)
        self.stages = {self.stage.name: self.stage}

    async def evaluate(
        self, calls: JudgeCalls, pair_id: str, pair: PairInput, source: Optional[str],
        modality: str, priority: int = 0,
    ) -> BaselineRecord:
        judge = calls.judge
        record = BaselineRecord(
            method=self.name, pair_id=pair_id, study_id=pair.study_id, modality=pair.modality,
            source=source, reference=pair.reference, candidate=pair.candidate, indication=pair.indication,
            judge=BaselineJudge(backend=judge.backend, model=judge.model,
                                prompt_version=self.stage.prompt(modality).version,
                                loaded_model=getattr(judge, "loaded_model", None),
                                max_model_len=getattr(judge, "max_model_len", None)),
        )
        spend, started = PairSpend(priority=priority), time.perf_counter()
        try:
            if not pair.reference.strip():
                raise StageFailed(Failure(stage="input", cause="the reference report is empty"))
            answer = await calls.ask(self.stage, modality, self.stage.user_input(pair), spend)
            record.answer, record.errors = answer.model_dump(), self.stage.errors(answer)
        except Exception as exc:
            record.fail(failure_of(exc, pair_id))
        record.timings_s = BaselineTimings(total=round(time.perf_counter() - started, 4))
        record.usage = BaselineUsage(**_counts(spend))
        return record


def failure_of(exc: Exception, pair_id: str) -> Failure:
    """The failure a pair's exception stands for, logged without report text."""
    if isinstance(exc, StageFailed):
        log.warning("pair %s failed at %s", pair_id, exc.failure.stage)
        return exc.failure
    if isinstance(exc, ValueError):  # scoring rejected the stages
        return Failure(stage="score", cause=str(exc))
    # a bug must not take the other pairs down with it
    log.error(
        "pair %s: internal error %s", pair_id, type(exc).__name__,
        exc_info=log.isEnabledFor(logging.DEBUG),  # tracebacks may quote report text
    )
    return Failure(stage="internal", cause=f"internal error: {type(exc).__name__}")


def _counts(spend: PairSpend) -> dict[str, int]:
    return {"prompt_tokens": spend.prompt_tokens, "completion_tokens": spend.completion_tokens,
            "judge_calls": spend.calls - spend.cached, "cached_calls": spend.cached}
