"""The records (docs/records.md): a pair in, everything the judge said, the scores.

Two kinds of record, told apart by `record_type`: RadMatch's audit record (`Record`,
which has no `record_type` key) and a single-call baseline's (`BaselineRecord`,
`"record_type": "baseline"`, docs/agreement.md). Every field is typed here; `record_io`
reads and writes records as JSON lines. Each kind has its `schema_version`, bumped on
any incompatible change, and its migrations (forward only), which bring an older
record up to date when it is read (`radmatch_audit.core.migrations`; `load_record`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter

from radmatch_audit.core.migrations import (  # noqa: F401 (the versions and migrations, named here too)
    BASELINE, BASELINE_MIGRATIONS, BASELINE_SCHEMA_VERSION, MIGRATIONS, SCHEMA_VERSION,
    UnknownSchemaVersion, migrate,
)
from radmatch_audit.core.schemas import AdjudicationStage, Finding, GradingStage, MatchingAnswer
# the score types sit below both this record format and the scoring core (which reads and
# writes records in scoring.record): the record embeds scores, it does not depend on scoring
from radmatch_audit.core.scores import Scores
from radmatch_audit.core.vocabulary import check_modality

# a later radmatch may add keys; they survive a rewrite. NaN and infinity are refused:
# JSON has no such numbers (they would be written as null, which no reader accepts)
_OPEN = ConfigDict(extra="allow", allow_inf_nan=False)


@dataclass(frozen=True)
class PairInput:
    """One pair to evaluate. `pair_id` defaults to the pair's position in the run."""

    reference: str
    candidate: str
    pair_id: Optional[str] = None
    study_id: Optional[str] = None
    modality: Optional[str] = None
    indication: Optional[str] = None

    def check(self, name: str) -> None:
        """Raise ValueError naming the pair and the field when a value has the wrong type."""
        for field_name in ("reference", "candidate"):
            value = getattr(self, field_name)
            if not isinstance(value, str):
                raise ValueError(
                    f"pair {name}: {field_name} must be a string, got {type(value).__name__}"
                )
        for field_name in ("indication", "pair_id", "study_id"):
            value = getattr(self, field_name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"pair {name}: {field_name} must be a string or None")
        if self.modality is not None:
            check_modality(self.modality, f"pair {name}: modality")


class Stages(BaseModel):
    """Stage answers as given by the judge. A stage that did not run is absent (None)."""

    model_config = _OPEN

    indication: Optional[str] = None
    reference_findings: Optional[list[Finding]] = None
    candidate_findings: Optional[list[Finding]] = None
    matching: Optional[MatchingAnswer] = None
    grading: Optional[GradingStage] = None
    adjudication: Optional[AdjudicationStage] = None  # after scoring; absent when not run


class JudgeInfo(BaseModel):
    """Which judge answered, with which prompts."""

    model_config = _OPEN

    backend: str = ""
    model: str = ""
    prompt_version: dict[str, str] = Field(default_factory=dict)  # stage -> version hash
    fewshot_set: Optional[str] = None
    exemplars_used: dict[str, int] = Field(default_factory=dict)  # stage -> exemplars sent
    # what the server said it loaded (vLLM's `root` in /v1/models) and its context, in tokens
    loaded_model: Optional[str] = None
    max_model_len: Optional[int] = None


class Usage(BaseModel):
    """What the pair cost. Calls answered by the cache or by another pair's call are cached."""

    model_config = _OPEN

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False  # every answer of this pair came from the cache
    judge_calls: int = 0
    cached_calls: int = 0
    # judge calls whose server gave no readable token counts: the tokens above are unknown for them
    unreported_calls: int = 0


class Timings(BaseModel):
    """Seconds per stage (waiting for the judge included) and for the whole pair."""

    model_config = _OPEN

    extract: float = 0.0
    match: float = 0.0
    grade: float = 0.0
    adjudicate: float = 0.0
    total: float = 0.0


class Failure(BaseModel):
    """Why a pair has no scores: the stage, the cause, what was tried."""

    model_config = _OPEN

    stage: str  # a judge stage, or "input" or "score"
    cause: str
    attempts: int = 0
    elapsed_s: float = 0.0

    def message(self) -> str:
        tried = f" (after {self.attempts} attempt(s) in {self.elapsed_s:.1f} s)" if self.attempts else ""
        return f"{self.stage}: {self.cause}{tried}"


class Sample(BaseModel):
    """A further run of the stages on the same pair (`--samples K`): sample 1 to K-1.

    Sample 0 is the record's own `stages` and `scores`, so that every other view reads
    a sampled record as it reads any record.
    """

    model_config = _OPEN
    index: int
    stages: Stages = Field(default_factory=Stages)
    repairs: list[str] = Field(default_factory=list)
    error: Optional[str] = None
    failure: Optional[Failure] = None
    scores: Optional[Scores] = None


class UnitVote(BaseModel):
    """One unit across samples: known by its findings' text, its outcome in each sample."""

    model_config = _OPEN
    unit: str  # the reference findings' text ("a + b"), or the candidate's for a spurious unit
    side: str  # "reference" or "candidate"
    outcomes: list[Optional[str]]  # per scored sample; None: no such unit in that sample
    majority: Optional[str]  # the outcome of more than half the scored samples, else None


class Stability(BaseModel):
    """How much the scores of one pair move between samples of the judge."""

    model_config = _OPEN
    samples: int
    scored: int
    actionable_errors: list[Optional[int]]  # per sample; None where a sample failed
    spread: Optional[int] = None  # max - min over the scored samples
    identical: Optional[bool] = None  # every sample scored and counted the same
    units: list[UnitVote] = Field(default_factory=list)


class Record(BaseModel):
    """One evaluated pair: inputs, stage answers, repairs, scores."""

    model_config = _OPEN

    schema_version: int = SCHEMA_VERSION
    pair_id: str
    study_id: Optional[str] = None
    modality: Optional[str] = None
    source: Optional[str] = None  # where the pair came from in its input file ("line 3")
    reference: str
    candidate: str
    indication: Optional[str] = None
    stages: Stages = Field(default_factory=Stages)
    repairs: list[str] = Field(default_factory=list)
    judge: JudgeInfo = Field(default_factory=JudgeInfo)
    timings_s: Timings = Field(default_factory=Timings)
    usage: Usage = Field(default_factory=Usage)
    flags: list[str] = Field(default_factory=list)
    error: Optional[str] = None  # Failure.message(), kept as one line for readers
    failure: Optional[Failure] = None
    scores: Optional[Scores] = None
    samples: Optional[list[Sample]] = None  # samples 1..K-1 under --samples K (absent for one)
    stability: Optional[Stability] = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def fail(self, failure: Failure) -> None:
        self.failure, self.error, self.scores = failure, failure.message(), None

    def to_json(self) -> str:
        # a stage that did not run is absent; "indication": null means "no indication"
        exclude: dict[str, Any] = {}
        absent = {k for k in _OPTIONAL_STAGES if getattr(self.stages, k) is None}
        if absent:
            exclude["stages"] = absent
        if self.samples is None:  # a one-sample record reads as it always has
            exclude.update(samples=True, stability=True)
        return self.model_dump_json(exclude=exclude or None)


_OPTIONAL_STAGES = ("reference_findings", "candidate_findings", "matching", "grading", "adjudication")


class BaselineJudge(BaseModel):
    """Which judge answered a baseline's call, with which prompt."""

    model_config = _OPEN

    backend: str = ""
    model: str = ""
    prompt_version: str = ""  # "baseline-v1-" + a hash of the instructions and the answer schema
    loaded_model: Optional[str] = None
    max_model_len: Optional[int] = None


class BaselineUsage(BaseModel):
    """The tokens of the pair's one call; `cached_calls` is 1 when the cache answered it."""

    model_config = _OPEN
    prompt_tokens: int = 0
    completion_tokens: int = 0
    judge_calls: int = 0
    cached_calls: int = 0


class BaselineTimings(BaseModel):
    """Seconds for the pair, waiting for the judge included (one call: no stages)."""

    model_config = _OPEN
    total: float = 0.0


class BaselineRecord(BaseModel):
    """One pair under a single-call baseline: the judge's answer and its count of errors.

    It holds no finding-level structure, which is the point of the comparison.
    """

    model_config = _OPEN

    record_type: Literal["baseline"] = BASELINE
    schema_version: int = BASELINE_SCHEMA_VERSION
    method: str  # "count" or "enumerate"
    pair_id: str
    study_id: Optional[str] = None
    modality: Optional[str] = None
    source: Optional[str] = None
    reference: str
    candidate: str
    indication: Optional[str] = None
    judge: BaselineJudge = Field(default_factory=BaselineJudge)
    answer: Optional[dict[str, Any]] = None  # as the judge gave it
    errors: Optional[int] = None  # clinically significant errors; None when the pair failed
    error: Optional[str] = None  # Failure.message()
    failure: Optional[Failure] = None
    timings_s: BaselineTimings = Field(default_factory=BaselineTimings)
    usage: BaselineUsage = Field(default_factory=BaselineUsage)

    @property
    def failed(self) -> bool:
        return self.error is not None

    def fail(self, failure: Failure) -> None:
        self.failure, self.error, self.errors = failure, failure.message(), None

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False)


AnyRecord = Annotated[
    Union[Annotated[Record, Tag("audit")], Annotated[BaselineRecord, Tag(BASELINE)]],
    Discriminator(lambda data: _record_type(data) or "audit"),
]
_ANY_RECORD: TypeAdapter[Union[Record, BaselineRecord]] = TypeAdapter(AnyRecord)


def _record_type(data: Any) -> Optional[str]:
    return data.get("record_type") if isinstance(data, dict) else getattr(data, "record_type", None)


def failed_input(
    pair_id: str, cause: str, *, source: Optional[str] = None, method: Optional[str] = None, **inputs: Any
) -> Union[Record, BaselineRecord]:
    """The record of a pair that could not be evaluated: its inputs as far as known, the
    cause; a baseline's record when `method` names a baseline."""
    kind: type[Union[Record, BaselineRecord]] = Record if method is None else BaselineRecord
    record = kind(
        pair_id=pair_id,
        source=source,
        reference=inputs.pop("reference", None) or "",
        candidate=inputs.pop("candidate", None) or "",
        **({} if method is None else {"method": method}),
        **{k: v for k, v in inputs.items() if v is not None},
    )
    record.fail(Failure(stage="input", cause=cause))
    return record


def load_record(data: dict[str, Any]) -> Union[Record, BaselineRecord]:
    """A record of either kind from its dict (as read from a line), migrated and validated."""
    return _ANY_RECORD.validate_python(migrate(data))


__all__ = [
    "AnyRecord",
    "BaselineRecord",
    "Failure",
    "JudgeInfo",
    "PairInput",
    "Record",
    "Sample",
    "Stability",
    "UnitVote",
    "SCHEMA_VERSION",
    "Stages",
    "Timings",
    "Usage",
    "failed_input",
    "load_record",
    "migrate",
]
