"""The stage answers, defined once with their caps as parameters, and the stored stages.

**Answers** (`answer_models(limits)`): strict pydantic models (`extra="forbid"`,
enums, bounded lists and strings) built from one definition. The same definition
gives both the JSON schema a judge is constrained to (its grammar caps) and the
model an answer is validated by, once, when it arrives (`validation_models`: the
tighter of the grammar caps and the canonical caps of `CANONICAL_LIMITS`).

Why caps differ by judge (docs/judge.md rule 8): a grammar backend that
compiles a schema to an automaton (Outlines, in process and in vLLM) pays for every
bounded repetition; on 2 cores the extraction schema with 60 findings and bounded
strings took 103 s to compile, with only inner lists bounded 3.6 s, and vLLM gives up
after 5 s. So a served judge gets `SERVER_LIMITS` (inner lists bounded, outer lists
and strings free) and the canonical caps are checked on arrival; the embedded small
judge gets `SMALL_MODEL_LIMITS` (everything bounded, so that a model that never
closes a list still yields valid JSON within its token budget).

**Stored stages** (`Finding`, `MatchingAnswer`, `GradingStage`): what a record keeps.
Findings carry the pipeline's ids; stored grading accepts any string as dimension or
severity, so an old or hand-made record still scores.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from radmatch.vocabulary import (
    ClinicalStatus,
    Comparison,
    ErrorSeverity,
    GradedDimension,
    MatchScope,
    MeasurementCategory,
    Quantity,
    Significance,
)

# NaN and infinity are refused (1e999 parses as infinity): JSON cannot carry them back
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)
_LENIENT = ConfigDict(extra="ignore", allow_inf_nan=False)
PRED_ID = r"^p_[0-9]{1,2}$"
GT_ID = r"^gt_[0-9]{1,2}$"


# --------------------------------------------------------------------------- caps


@dataclass(frozen=True)
class Limits:
    """Caps of the answer models; None leaves a list or string unbounded."""

    findings: Optional[int]
    text: Optional[int]
    evidence: Optional[int]
    quote: Optional[int]
    measurements: Optional[int]
    unit: Optional[int]
    rows: Optional[int]
    reasoning: Optional[int]
    errors_per_match: Optional[int]
    indication: Optional[int]
    exact_grade_length: bool  # the grammar admits exactly one error list per row sent

    def tightest(self, other: "Limits") -> "Limits":
        """Each cap the smaller of the two (None is no cap)."""
        tighter = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, bool):
                tighter[f.name] = mine or theirs
            else:
                tighter[f.name] = theirs if mine is None else mine if theirs is None else min(mine, theirs)
        return replace(self, **tighter)


# What any answer must fit, whatever the judge.
CANONICAL_LIMITS = Limits(
    findings=60, text=400, evidence=4, quote=400, measurements=12, unit=24, rows=200,
    reasoning=300, errors_per_match=5, indication=2000, exact_grade_length=True,
)
SERVER_LIMITS = Limits(
    findings=None, text=None, evidence=4, quote=None, measurements=8, unit=None, rows=None,
    reasoning=None, errors_per_match=5, indication=None, exact_grade_length=False,
)
# Sized so that the longest JSON these caps allow fits SMALL_MODEL_MAX_TOKENS (config.py):
# with SmolLM2's tokenizer a full extraction answer is about 1,100 tokens of 1,700. The
# caps admit everything the exemplars teach (tests/test_fewshots.py checks it): two quotes
# for a finding merged from FINDINGS and IMPRESSION (rule 4), two measurements (a value
# and its prior). Six findings rather than eight pay for the second quote: on a busy
# 2-core machine the extraction grammar then compiles faster than with 8 findings and
# one quote (195 s against 237 s), while four measurements would take about 330 s.
SMALL_MODEL_LIMITS = Limits(
    findings=6, text=120, evidence=2, quote=100, measurements=2, unit=16, rows=16,
    reasoning=100, errors_per_match=2, indication=300, exact_grade_length=True,
)


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class AnswerModels:
    """One model per stage, all built from the same caps."""

    extract: type[BaseModel]
    match: type[BaseModel]
    grade: type[BaseModel]
    exact_grade_length: bool

    def for_stage(self, stage: str, rows: Optional[int] = None) -> type[BaseModel]:
        """The stage's model; for grading with `rows`, one admitting exactly that many lists."""
        if stage == "grade" and rows is not None and self.exact_grade_length:
            return _grade_exactly(self.grade, rows)
        return getattr(self, stage)


@lru_cache(maxsize=256)
def _grade_exactly(grade: type[BaseModel], rows: int) -> type[BaseModel]:
    item = grade.model_fields["errors_per_match"].annotation
    return create_model(
        "GradingAnswer",
        __config__=_STRICT,
        errors_per_match=(item, Field(min_length=rows, max_length=rows)),
    )


@lru_cache(maxsize=8)
def answer_models(limits: Limits) -> AnswerModels:
    """The strict answer model of every stage under `limits` (the one definition)."""
    quote = Annotated[str, Field(min_length=1, max_length=limits.quote)]
    pred_id = Annotated[str, Field(pattern=PRED_ID)]
    gt_id = Annotated[str, Field(pattern=GT_ID)]
    measurement = create_model(
        "Measurement",
        __config__=_STRICT,
        value=(float, ...),
        unit=(Optional[str], Field(default=None, max_length=limits.unit)),
        category=(MeasurementCategory, ...),
        prior=(bool, False),
        quantity=(Optional[Quantity], None),
    )
    finding = create_model(
        "Finding",
        __config__=_STRICT,
        text=(str, Field(min_length=1, max_length=limits.text)),
        clinical_status=(ClinicalStatus, ...),
        clinical_significance=(Significance, ...),
        comparison=(Optional[Comparison], None),
        measurements=(list[measurement], Field(default_factory=list, max_length=limits.measurements)),
        evidence=(list[quote], Field(default_factory=list, max_length=limits.evidence)),
    )
    row = create_model(
        "MatchRow",  # field order is generation order: reasoning before scope
        __config__=_STRICT,
        pred_id=(pred_id, ...),
        gt_id=(gt_id, ...),
        reasoning=(str, Field(max_length=limits.reasoning)),
        match_scope=(MatchScope, ...),
    )
    error = create_model(
        "GradingError",
        __config__=_STRICT,
        dimension=(GradedDimension, ...),
        severity=(ErrorSeverity, ...),
        reasoning=(str, Field(min_length=1, max_length=limits.reasoning)),
    )
    return AnswerModels(
        extract=create_model(
            "ExtractionAnswer",
            __config__=_STRICT,
            findings=(list[finding], Field(max_length=limits.findings)),
        ),
        match=create_model(
            "MatchingAnswer",
            __config__=_STRICT,
            matches=(list[row], Field(max_length=limits.rows)),
            unmatched_pred=(list[pred_id], Field(max_length=limits.findings)),
            unmatched_gt=(list[gt_id], Field(max_length=limits.findings)),
        ),
        grade=create_model(
            "GradingAnswer",
            __config__=_STRICT,
            errors_per_match=(
                list[Annotated[list[error], Field(max_length=limits.errors_per_match)]],
                Field(max_length=limits.rows),
            ),
        ),
        exact_grade_length=limits.exact_grade_length,
    )


def validation_models(grammar: Limits) -> AnswerModels:
    """The models an answer decoded under `grammar` is validated by: grammar and canonical caps.

    Grading is always held to one error list per row sent, whatever the grammar did.
    """
    return answer_models(replace(grammar.tightest(CANONICAL_LIMITS), exact_grade_length=True))


CANONICAL = answer_models(CANONICAL_LIMITS)
ANSWER_MODELS: dict[str, type[BaseModel]] = {
    "extract": CANONICAL.extract,
    "match": CANONICAL.match,
    "grade": CANONICAL.grade,
}


# --------------------------------------------------------------------------- stored stages


class Measurement(BaseModel):
    """One numeric value of a stored finding."""

    model_config = _LENIENT

    value: float
    unit: Optional[str] = None
    category: MeasurementCategory
    prior: bool = False
    quantity: Optional[Quantity] = None


class Finding(BaseModel):
    """A finding as stored in a record: the judge's answer plus the pipeline's id."""

    model_config = _LENIENT

    text: str = Field(min_length=1)
    clinical_status: ClinicalStatus
    clinical_significance: Significance
    comparison: Optional[Comparison] = None
    measurements: list[Measurement] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    id: str = Field(min_length=1)  # last, as records have always written it


def number_findings(findings: list[BaseModel], prefix: str) -> list[Finding]:
    """Give extracted findings the pipeline's ids (`gt_1`, ... or `p_1`, ...) in judge order."""
    return [
        Finding(id=f"{prefix}_{i}", **finding.model_dump()) for i, finding in enumerate(findings, 1)
    ]


class MatchRow(BaseModel):
    """One stored (pred, gt) binding."""

    model_config = _STRICT

    pred_id: str
    gt_id: str
    reasoning: str = ""
    match_scope: MatchScope


class MatchingAnswer(BaseModel):
    """The matching stage as stored: the judge's answer as given, before repair."""

    model_config = _STRICT

    matches: list[MatchRow]
    unmatched_pred: list[str]
    unmatched_gt: list[str]


class StoredGradingError(BaseModel):
    """A grading error as stored: any string is accepted, scoring filters it."""

    model_config = _LENIENT

    dimension: str
    severity: str
    reasoning: str = ""


class GradingStage(BaseModel):
    """The grading stage as stored: the rows sent and the answer aligned with them."""

    model_config = _LENIENT

    pairs: list[tuple[str, str]] = Field(default_factory=list)
    errors_per_match: list[list[StoredGradingError]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _aligned(self) -> "GradingStage":
        if len(self.pairs) != len(self.errors_per_match):
            raise ValueError(
                f"errors_per_match has {len(self.errors_per_match)} entries "
                f"but pairs has {len(self.pairs)}; they must align"
            )
        return self
