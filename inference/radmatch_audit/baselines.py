"""The paper's single-call baselines as judges that write records (docs/agreement.md).

- `count`: the judge answers `{"errors": N}`, a bare integer of clinically significant
  errors;
- `enumerate`: the judge answers `{"errors": [{"description": ...}, ...]}`, one entry
  per error, and the count is the length of the list.

Both answers are schema-constrained like RadMatch's stages and go through the same
call path (`radmatch_audit.calls.JudgeCalls`: answer cache, in-flight sharing, retries,
validation); each is a stage object (`radmatch_audit.stages.baselines`). A baseline
record is a JSON line with `"record_type": "baseline"`, read by `radmatch-audit agreement`;
it holds no finding-level structure, which is the point of the comparison.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from radmatch_audit.pipeline import stream
from radmatch_audit.records import Failure, PairInput
from radmatch_audit.stages.baselines import (  # noqa: F401 (the baselines' definitions, named here too)
    MAX_COUNT,
    METHODS,
    CountAnswer,
    baseline_stage,
    enumerate_model,
    load_prompt,
)

if TYPE_CHECKING:
    from radmatch_audit.calls import PairSpend
    from radmatch_audit.judges.base import Judge

log = logging.getLogger(__name__)

RECORD_TYPE = "baseline"
RECORD_VERSION = 1


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

        self.method = method
        self.stage = baseline_stage(method, small_model)
        self.version = self.stage.prompt().version
        self.judge = judge
        self.concurrency = max(1, concurrency)
        self.calls = JudgeCalls(judge, cache=AnswerCache(cache_dir), retries=retries,
                                concurrency=self.concurrency)
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
            answer = await self.calls.ask(self.stage, pair.modality, self.stage.user_input(pair), spend)
            record["answer"] = answer.model_dump()
            record["errors"] = self.stage.errors(answer)
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
