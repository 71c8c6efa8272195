"""The run loop: pairs in, one record per pair out, through one judge.

    pair -> stages (indication read, extract, match, repair, grade) -> score -> record

`Evaluator` owns the resources of a run and their lifetime: one event loop (in its
own thread, so the same evaluator serves scripts, notebooks, training loops and the
CLI, call after call), the judge and its HTTP client or model, and the answer
cache. Use it as a context manager, or call `close()`.

Pairs stream: at most `concurrency` judge calls are in flight. A pair is opened
whenever the judge has a free slot that no call waits for (candidates of one
reference share its calls, so a pair does not always bring a call of its own), up
to `PAIRS_PER_SLOT` pairs per slot, so that a freed slot always finds a call ready;
the oldest pair's call takes it, and once the input is read to its end, the call with
the most stages still to follow. Memory stays flat however many pairs a run has. A pair
whose judge fails gets a record with `error` and `failure` and no scores, never zero errors.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref
from collections import deque
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, Iterator, Optional, Union

from radmatch_audit.cache import MEMO_ENTRIES, AnswerCache
from radmatch_audit.calls import JudgeCalls, PairSpend, RunStats, StageFailed
from radmatch_audit.config import JudgeConfig
from radmatch_audit.judges.base import Judge
from radmatch_audit.loop import LoopThread
from radmatch_audit.records import Failure, JudgeInfo, PairInput, Record, Sample, Stages, Timings, Usage
from radmatch_audit.schemas import SERVER_LIMITS, SMALL_MODEL_LIMITS, Limits
from radmatch_audit.scoring import score_record
from radmatch_audit.stages import pair_stages, run_stages
from radmatch_audit.vocabulary import DEFAULT_MODALITY, STAGES, check_modality

log = logging.getLogger(__name__)

# The most pairs held open per judge call slot. A pair's stages run one after another,
# and candidates share their reference's calls, so one pair per slot leaves the judge
# idle; pairs are opened on demand (`stream`'s `room`), this only bounds memory.
PAIRS_PER_SLOT = 8
# Pairs read ahead of the open ones, per slot: when the input ends within them, the run's
# tail is known. Two per slot covers a tail's chains of calls (1, 2 and 8 per slot gave
# the same efficiency in scripts/bench_pipeline.py) and keeps smaller runs oldest-first.
READ_AHEAD_PER_SLOT = 2

OnRecord = Callable[[Record], None]
# A pair to run: its id, the pair, and where it came from (an input line) or None.
Job = tuple[str, PairInput, Optional[str]]


class Evaluator:
    """Runs pairs through one judge; reuse it across calls, close it when done."""

    def __init__(
        self,
        judge: Judge,
        *,
        modality: str = DEFAULT_MODALITY,
        concurrency: int = 8,
        cache_dir: Union[str, Path, None] = None,
        limits: Optional[Limits] = None,
        max_tokens: Optional[dict[str, int]] = None,
        retries: int = 3,
        backoff_s: float = 1.0,
        max_wait_s: float = 60.0,
        memo_entries: int = MEMO_ENTRIES,
        close_judge: bool = True,
        samples: int = 1,
    ) -> None:
        check_modality(modality, "The 'modality' parameter of Evaluator")
        if concurrency < 1:
            raise ValueError(f"The 'concurrency' parameter of Evaluator must be >= 1; got {concurrency}")
        if samples < 1:
            raise ValueError(f"The 'samples' parameter of Evaluator must be >= 1; got {samples}")
        self.judge = judge
        self.samples = samples
        self.modality = modality
        self.concurrency = concurrency
        self.limits = limits or SERVER_LIMITS
        self.stats = RunStats()
        self.stages = pair_stages(self.limits, max_tokens)
        self.calls = JudgeCalls(
            judge,
            cache=AnswerCache(Path(cache_dir) if cache_dir else None, memo_entries=memo_entries),
            retries=retries,
            backoff_s=backoff_s,
            max_wait_s=max_wait_s,
            concurrency=concurrency,
            stats=self.stats,
        )
        self._loop = LoopThread()
        # closed by close(), or when garbage-collected, or at exit: never left half-open
        self._finalizer = weakref.finalize(
            self, _shut_down, judge if close_judge else None, self._loop, self.calls.cache
        )

    @classmethod
    def from_config(cls, config: JudgeConfig, judge: Optional[Judge] = None) -> "Evaluator":
        """An evaluator for `config`; a `judge` given here stays its caller's to close."""
        return cls(
            judge or config.build_judge(),
            close_judge=judge is None,
            modality=config.modality,
            concurrency=config.resolved_concurrency,
            cache_dir=config.answer_cache_dir(),
            limits=SMALL_MODEL_LIMITS if config.small_model_decoding else SERVER_LIMITS,
            max_tokens=config.stage_max_tokens(),
            retries=config.retries,
            samples=config.samples,
        )

    # ------------------------------------------------------------------ lifetime

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the judge, unless its caller keeps it (`close_judge=False`), and the loop.

        Closing a judge closes its HTTP client, or stops its in-process generation.
        """
        self._finalizer()

    def check(self) -> None:
        """Pre-flight: raise JudgeUnavailable, saying the fix, when the judge cannot serve."""
        self._loop.run(self.judge.check())

    # ------------------------------------------------------------------ runs

    def run(self, pairs: Iterable[Union[PairInput, Job]], *, on_record: Optional[OnRecord] = None) -> RunStats:
        """Evaluate pairs as a stream; `on_record` gets each record as it finishes.

        Items are `PairInput`s, or `(pair_id, pair, source)` jobs whose id is already
        settled. Records are not kept: write them in `on_record`.
        """
        self._loop.run(self._run(_jobs(pairs), on_record or (lambda record: None)))
        return self.stats

    def evaluate(self, pairs: Iterable[PairInput], *, on_record: Optional[OnRecord] = None) -> list[Record]:
        """Evaluate pairs; records come back in input order, `on_record` sees them as they finish."""
        return self._loop.run(self._evaluate_list(list(pairs), on_record))

    async def aevaluate(self, pairs: Iterable[PairInput], *, on_record: Optional[OnRecord] = None) -> list[Record]:
        """`evaluate` for async callers: the work runs on the evaluator's own loop."""
        future = self._loop.submit(self._evaluate_list(list(pairs), on_record))
        return await asyncio.wrap_future(future)

    async def _evaluate_list(self, pairs: list[PairInput], on_record: Optional[OnRecord]) -> list[Record]:
        jobs = list(_jobs(pairs))  # every pair checked, ids settled, before any judge call
        position = {pair_id: i for i, (pair_id, _, _) in enumerate(jobs)}
        records: list[Optional[Record]] = [None] * len(jobs)

        def keep(record: Record) -> None:
            records[position[record.pair_id]] = record
            if on_record is not None:
                on_record(record)

        await self._run(iter(jobs), keep)
        return records  # type: ignore[return-value]

    async def _run(self, jobs: Iterator[Job], emit: OnRecord) -> None:
        async def one(job: Job, position: int) -> None:
            record = await self._evaluate_pair(*job, priority=position)
            self.stats.pairs += 1
            self.stats.failed += record.error is not None
            emit(record)

        gate = self.calls.gate  # oldest first until the input ends; restored after every run
        try:
            await stream(
                jobs, one, self.concurrency * PAIRS_PER_SLOT,
                # one slot (the in-process judge) is never idle while a call is ready, so
                # the order cannot shorten the run; records then keep coming oldest first
                on_input_end=gate.by_chain if self.concurrency > 1 else None,
                room=gate.has_room, floor=self.concurrency,
                read_ahead=self.concurrency * READ_AHEAD_PER_SLOT,
            )
        finally:
            gate.by_age()

    # ------------------------------------------------------------------ one pair

    async def _run_samples(self, record: Record, asker: Callable[[int], Any]) -> None:
        """Run the stages `samples` times at once: sample 0 into the record, the rest beside it.

        A failure of sample 0 fails the pair (after the other samples are stored); a
        failure of another sample is kept in that sample.
        """
        first, *others = await asyncio.gather(
            run_stages(record, asker(0), self.limits),
            *(_sample(record, k, asker(k), self.limits) for k in range(1, self.samples)),
            return_exceptions=True,
        )
        record.samples = others
        if isinstance(first, BaseException):
            raise first

    def judge_info(self, modality: str) -> JudgeInfo:
        return JudgeInfo(
            backend=self.judge.backend,
            model=self.judge.model,
            prompt_version={name: stage.prompt(modality).version for name, stage in self.stages.items()},
            fewshot_set=modality,
            # what the pre-flight read from the server (vLLM's `root`, its context)
            loaded_model=getattr(self.judge, "loaded_model", None),
            max_model_len=getattr(self.judge, "max_model_len", None),
        )

    async def _evaluate_pair(
        self, pair_id: str, pair: PairInput, source: Optional[str], priority: int = 0
    ) -> Record:
        modality = pair.modality or self.modality
        record = Record(
            pair_id=pair_id, study_id=pair.study_id, modality=modality, source=source,
            reference=pair.reference, candidate=pair.candidate, indication=pair.indication,
            judge=self.judge_info(modality),
        )
        if not pair.reference.strip():
            record.fail(Failure(stage="input", cause="the reference report is empty"))
            return record
        spend = PairSpend(priority=priority)
        started = time.perf_counter()

        def asker(sample: int) -> Callable[..., Any]:
            def ask(stage: str, user_input: dict[str, Any], rows: Optional[list[tuple[str, str]]] = None) -> Any:
                return self.calls.ask(self.stages[stage], modality, user_input, spend, rows=rows, sample=sample)
            return ask

        try:
            if self.samples == 1:
                await run_stages(record, asker(0), self.limits)
            else:
                await self._run_samples(record, asker)
            record = score_record(record)
        except StageFailed as exc:
            record.fail(exc.failure)
            log.warning("pair %s failed at %s", pair_id, exc.failure.stage)  # no report text
        except ValueError as exc:  # scoring rejected the stages
            record.fail(Failure(stage="score", cause=str(exc)))
        except Exception as exc:  # a bug must not take the other pairs down with it
            record.fail(Failure(stage="internal", cause=f"internal error: {type(exc).__name__}"))
            log.error(
                "pair %s: internal error %s", pair_id, type(exc).__name__,
                exc_info=log.isEnabledFor(logging.DEBUG),  # tracebacks may quote report text
            )
        if record.error is not None and record.samples is not None:
            try:  # the pair failed; the samples that ran are scored all the same
                record = score_record(record)
            except ValueError:
                pass
        record.timings_s = Timings(
            **{stage: round(spend.seconds.get(stage, 0.0), 4) for stage in STAGES},
            total=round(time.perf_counter() - started, 4),
        )
        record.usage = Usage(
            prompt_tokens=spend.prompt_tokens,
            completion_tokens=spend.completion_tokens,
            cached=spend.calls > 0 and spend.cached == spend.calls,
            judge_calls=spend.calls - spend.cached,
            cached_calls=spend.cached,
            unreported_calls=spend.unreported,
        )
        record.judge.exemplars_used = spend.exemplars
        return record


async def _sample(record: Record, index: int, ask: Callable[..., Any], limits: Limits) -> Sample:
    """Sample `index` of a pair's stages; its failure is kept in the sample, not raised."""
    scratch = record.model_copy(update={"stages": Stages(), "flags": []})
    sample = Sample(index=index, stages=scratch.stages)
    try:
        await run_stages(scratch, ask, limits)
    except StageFailed as exc:
        sample.failure, sample.error = exc.failure, exc.failure.message()
    except Exception as exc:  # a bug in one sample must not take the pair down
        sample.failure = Failure(stage="internal", cause=f"internal error: {type(exc).__name__}")
        sample.error = sample.failure.message()
    return sample


async def stream(
    jobs: Iterable[Any],
    handle: Callable[[Any, int], Awaitable[None]],
    window: int,
    *,
    on_input_end: Optional[Callable[[], None]] = None,
    room: Optional[Callable[[], Awaitable[None]]] = None,
    floor: int = 0,
    read_ahead: Optional[int] = None,
) -> None:
    """`await handle(job, position)` for every job, at most `window` at once.

    With `room`, a job beyond the first `floor` running is opened only once `await
    room()` returns (the judge has a free slot no call is waiting for): jobs are opened
    as fast as the judge can take their calls, not `window` at once. Candidates of one
    reference share its calls, so a fixed number of open pairs can leave the judge half
    idle; opening on demand keeps it full without holding more pairs than it needs.

    Jobs are read up to `read_ahead` (default `window`) ahead. Once the input is
    exhausted, `on_input_end()` is called and the jobs left are opened without waiting
    for room: the run's tail is then known, and its chains of calls can start together
    rather than one by one.

    Memory stays flat however long `jobs` is. The first exception (say, a full disk
    when a record is written) stops reading jobs, cancels the running ones and
    propagates.
    """
    slots = asyncio.Semaphore(window)
    running: set[asyncio.Task] = set()
    broken: list[BaseException] = []
    ahead: deque[tuple[int, Any]] = deque()
    numbered = enumerate(jobs)
    exhausted = False

    def read_on() -> None:
        nonlocal exhausted
        while not exhausted and len(ahead) < (read_ahead or window):
            try:
                ahead.append(next(numbered))
            except StopIteration:
                exhausted = True
                if on_input_end is not None:
                    on_input_end()

    async def one(job: Any, position: int) -> None:
        try:
            await handle(job, position)
        except BaseException as exc:
            broken.append(exc)
            raise
        finally:
            slots.release()

    try:
        read_on()
        while ahead:
            await slots.acquire()
            if room is not None and not exhausted and len(running) >= floor:
                await room()
            if broken:
                raise broken[0]
            position, job = ahead.popleft()
            task = asyncio.ensure_future(one(job, position))
            running.add(task)
            task.add_done_callback(running.discard)
            read_on()
            if room is not None and not exhausted:
                await asyncio.sleep(0)  # the job runs up to its first judge call before the next is weighed
        await asyncio.gather(*running)
    except BaseException:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise


def _shut_down(judge: Optional[Judge], loop: LoopThread, cache: AnswerCache) -> None:
    try:
        if judge is not None:
            loop.run(judge.aclose())
    finally:
        loop.close()
        cache.close()


def _jobs(pairs: Iterable[Union[PairInput, Job]]) -> Iterator[Job]:
    """Checked jobs with settled ids (the position when a pair has none); a repeat is refused."""
    seen: set[str] = set()
    for position, item in enumerate(pairs):
        pair_id, pair, source = item if isinstance(item, tuple) else (None, item, None)
        if not isinstance(pair, PairInput):
            raise TypeError(f"pair #{position} must be a PairInput, got {type(pair).__name__}")
        pair_id = pair_id or pair.pair_id or str(position)
        pair.check(pair_id)
        if pair_id in seen:
            raise ValueError(f"pair {pair_id}: pair_id occurs more than once in this run")
        seen.add(pair_id)
        yield pair_id, pair, source


def evaluate_pairs(
    pairs: Iterable[PairInput], config: Optional[JudgeConfig] = None, **kwargs: Any
) -> list[Record]:
    """One-shot convenience: build the judge from config (or RADMATCH_* variables), evaluate."""
    with Evaluator.from_config(config or JudgeConfig.from_env()) as evaluator:
        return evaluator.evaluate(pairs, **kwargs)


def freeze_setup_heap() -> None:
    """Leave every object alive now out of the garbage collector's later passes.

    For a process that is RadMatch's alone (the CLI), once its setup is done: the modules,
    the judge and its client live until the process ends, yet a full collection mid-run
    re-scans them all and stalls the event loop that sends the judge calls (178 ms once
    per run in scripts/bench_pipeline.py, longer than a whole wave of 0.2 s calls). Not for
    a library caller's process (a training loop): its objects alive now may become cyclic
    garbage later, and frozen ones are never collected.
    """
    gc.collect()
    gc.freeze()
