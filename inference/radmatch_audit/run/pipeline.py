"""The one runner: pairs in, one record per pair out, through one judge.

    pair -> method (RadMatch: indication, extract, match, repair, grade, score;
                    a baseline: one call) -> record

`Evaluator` owns the resources of a run and their lifetime: one event loop (in its
own thread, so the same evaluator serves scripts, notebooks, training loops and the
CLI, call after call), the judge and its HTTP client or model, and the answer
cache. What one pair's evaluation is belongs to its method (`radmatch_audit.run.methods`):
RadMatch by default, or a single-call baseline (`method="count"`, `"enumerate"`).
Use it as a context manager, or call `close()`.

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
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from radmatch_audit.run.cache import MEMO_ENTRIES, AnswerCache
from radmatch_audit.run.calls import JudgeCalls, RunStats
from radmatch_audit.judges.config import JudgeConfig
from radmatch_audit.judges.base import Judge
from radmatch_audit.run.loop import LoopThread, stream
from radmatch_audit.run.methods import AnyRecord, Method, make_method
from radmatch_audit.core.records import PairInput
from radmatch_audit.core.schemas import SERVER_LIMITS, Limits
from radmatch_audit.stages import JudgeStage, stage_prompt
from radmatch_audit.core.vocabulary import DEFAULT_MODALITY, check_modality

# The most pairs held open per judge call slot. A pair's stages run one after another,
# and candidates share their reference's calls, so one pair per slot leaves the judge
# idle; pairs are opened on demand (`stream`'s `room`), this only bounds memory.
PAIRS_PER_SLOT = 8
# Pairs read ahead of the open ones, per slot: when the input ends within them, the run's
# tail is known. Two per slot covers a tail's chains of calls (1, 2 and 8 per slot gave
# the same efficiency in benchmarks/bench_pipeline.py) and keeps smaller runs oldest-first.
READ_AHEAD_PER_SLOT = 2

OnRecord = Callable[[AnyRecord], None]
# A pair to run: its id, the pair, and where it came from (an input line) or None.
Job = tuple[str, PairInput, Optional[str]]


class Evaluator:
    """Runs pairs through one judge; reuse it across calls, close it when done.

    `method` is RadMatch's stages ("radmatch", the default: `Record`s) or a single-call
    baseline ("count", "enumerate": `BaselineRecord`s), or a `methods.Method`.
    """

    def __init__(
        self,
        judge: Judge,
        *,
        method: Union[str, Method] = "radmatch",
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
        adjudication: bool = True,
        config: Optional[JudgeConfig] = None,
    ) -> None:
        """With `config` (as `from_config` gives it), the run's settings are the config's and
        the keywords modality to adjudication are not read; the evaluator keeps it as `config`."""
        if config is not None:
            modality, concurrency, cache_dir = config.modality, config.resolved_concurrency, config.answer_cache_dir()
            limits, max_tokens, retries = config.limits, config.stage_max_tokens(), config.retries
            samples = config.samples if method == "radmatch" else 1  # a baseline's one call
            adjudication = config.adjudication
        self.config = config
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
        self.method = method if isinstance(method, Method) else make_method(
            method, limits=self.limits, max_tokens=max_tokens, samples=samples, adjudication=adjudication)
        self.stats = RunStats()
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
    def from_config(
        cls, config: JudgeConfig, judge: Optional[Judge] = None, *, method: str = "radmatch"
    ) -> "Evaluator":
        """An evaluator for `config`; a `judge` given here stays its caller's to close."""
        return cls(judge or config.build_judge(), method=method, close_judge=judge is None, config=config)

    @property
    def stages(self) -> dict[str, JudgeStage]:
        """The judge calls the method makes, by name."""
        return self.method.stages

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
        self._loop.run(self._check())

    async def _check(self) -> None:
        await self.judge.check()
        # a judge that estimates tokens learns the server's rate on the extraction prompt
        # (judges know no stage: the runner hands them the prompt)
        calibrate = getattr(self.judge, "calibrate", None)
        if calibrate is not None:
            probe = stage_prompt("extract", DEFAULT_MODALITY).messages({"report": "", "indication": None})
            await calibrate(probe)

    # ------------------------------------------------------------------ runs

    def run(self, pairs: Iterable[Union[PairInput, Job]], *, on_record: Optional[OnRecord] = None) -> RunStats:
        """Evaluate pairs as a stream; `on_record` gets each record as it finishes.

        Items are `PairInput`s, or `(pair_id, pair, source)` jobs whose id is already
        settled. Records are not kept: write them in `on_record`.
        """
        self._loop.run(self._run(_jobs(pairs), on_record or (lambda record: None)))
        return self.stats

    def evaluate(self, pairs: Iterable[PairInput], *, on_record: Optional[OnRecord] = None) -> list[AnyRecord]:
        """Evaluate pairs; records come back in input order, `on_record` sees them as they finish."""
        return self._loop.run(self._evaluate_list(list(pairs), on_record))

    async def aevaluate(self, pairs: Iterable[PairInput], *, on_record: Optional[OnRecord] = None) -> list[AnyRecord]:
        """`evaluate` for async callers: the work runs on the evaluator's own loop."""
        future = self._loop.submit(self._evaluate_list(list(pairs), on_record))
        return await asyncio.wrap_future(future)

    async def _evaluate_list(self, pairs: list[PairInput], on_record: Optional[OnRecord]) -> list[AnyRecord]:
        jobs = list(_jobs(pairs))  # every pair checked, ids settled, before any judge call
        position = {pair_id: i for i, (pair_id, _, _) in enumerate(jobs)}
        records: list[Optional[AnyRecord]] = [None] * len(jobs)

        def keep(record: AnyRecord) -> None:
            records[position[record.pair_id]] = record
            if on_record is not None:
                on_record(record)

        await self._run(iter(jobs), keep)
        return records  # type: ignore[return-value]

    async def _run(self, jobs: Iterator[Job], emit: OnRecord) -> None:
        async def one(job: Job, position: int) -> None:
            pair_id, pair, source = job
            record = await self.method.evaluate(
                self.calls, pair_id, pair, source, pair.modality or self.modality, priority=position)
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
) -> list[AnyRecord]:
    """One-shot convenience: build the judge from config (or RADMATCH_* variables), evaluate."""
    with Evaluator.from_config(config or JudgeConfig.from_env()) as evaluator:
        return evaluator.evaluate(pairs, **kwargs)


def freeze_setup_heap() -> None:
    """Leave every object alive now out of the garbage collector's later passes.

    For a process that is RadMatch's alone (the CLI), once its setup is done: the modules,
    the judge and its client live until the process ends, yet a full collection mid-run
    re-scans them all and stalls the event loop that sends the judge calls (178 ms once
    per run in benchmarks/bench_pipeline.py, longer than a whole wave of 0.2 s calls). Not for
    a library caller's process (a training loop): its objects alive now may become cyclic
    garbage later, and frozen ones are never collected.
    """
    gc.collect()
    gc.freeze()
