"""Decoding schemas: the stage answer models with list and string caps chosen per judge.

Caps in a JSON schema are not free. Grammar backends that compile the schema to an
automaton (Outlines, in process and in vLLM) pay for every bounded repetition: on
these 2 cores the extraction schema with `maxItems` 60 and string `maxLength` took
103 s to compile, with inner caps only 3.6 s, and vLLM gives up after 5 s by default
(HTTP 500). So:

* `SERVER_LIMITS` (served judges): inner lists capped (evidence, measurements, errors
  per row), outer lists and strings free. The canonical caps of `radmatch.schemas`
  (60 findings, 200 rows, ...) are checked after decoding instead; an answer past
  them is invalid, retried once, then its pair fails with the reason.
* `SMALL_MODEL_LIMITS` (the embedded judge): everything capped, so that even a model
  that never closes a list yields valid JSON within its token budget (JUDGE.md rule
  8); the grading answer is held to exactly one list per row sent. Compiled once per
  process.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from radmatch import schemas as s


@dataclass(frozen=True)
class Limits:
    """Caps of the decoding schema; None leaves a list or string unbounded."""

    findings: Optional[int] = s.MAX_FINDINGS
    text: Optional[int] = s.MAX_TEXT
    evidence: Optional[int] = s.MAX_EVIDENCE
    quote: Optional[int] = s.MAX_TEXT
    measurements: Optional[int] = s.MAX_MEASUREMENTS
    rows: Optional[int] = s.MAX_MATCH_ROWS
    reasoning: Optional[int] = s.MAX_REASONING
    errors_per_match: Optional[int] = s.MAX_ERRORS_PER_MATCH
    indication: Optional[int] = 2000
    exact_grade_length: bool = True


SERVER_LIMITS = Limits(
    findings=None, text=None, evidence=s.MAX_EVIDENCE, quote=None, measurements=8, rows=None,
    reasoning=None, errors_per_match=s.MAX_ERRORS_PER_MATCH, indication=None,
    exact_grade_length=False,
)
# Sized so that the longest JSON these caps allow fits SMALL_MODEL_MAX_TOKENS (config.py).
SMALL_MODEL_LIMITS = Limits(
    findings=8, text=120, evidence=1, quote=100, measurements=2, rows=16, reasoning=100,
    errors_per_match=2, indication=300,
)

_STRICT = ConfigDict(extra="forbid")
PRED_ID = r"^p_[0-9]{1,2}$"
GT_ID = r"^gt_[0-9]{1,2}$"


@dataclass(frozen=True)
class AnswerModels:
    indication: type[BaseModel]
    extract: type[BaseModel]
    match: type[BaseModel]
    grade: type[BaseModel]

    exact_grade_length: bool = True

    def for_stage(self, stage: str, rows: Optional[int] = None) -> type[BaseModel]:
        """The stage's model; for grading with `rows`, one that admits exactly that many lists."""
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
    """Strict pydantic models whose JSON schemas the judge is constrained to."""
    quote = Annotated[str, Field(min_length=1, max_length=limits.quote)]
    pred_id = Annotated[str, Field(pattern=PRED_ID)]
    gt_id = Annotated[str, Field(pattern=GT_ID)]
    measurement = create_model(
        "Measurement",
        __config__=_STRICT,
        value=(float, ...),
        unit=(Optional[str], Field(default=None, max_length=16 if limits.text else None)),
        category=(s.MeasurementCategory, ...),
        prior=(bool, False),
    )
    finding = create_model(
        "Finding",
        __config__=_STRICT,
        text=(str, Field(min_length=1, max_length=limits.text)),
        clinical_status=(s.ClinicalStatus, ...),
        clinical_significance=(s.Significance, ...),
        comparison=(Optional[s.Comparison], None),
        measurements=(list[measurement], Field(default_factory=list, max_length=limits.measurements)),
        evidence=(list[quote], Field(default_factory=list, max_length=limits.evidence)),
    )
    row = create_model(
        "MatchRow",
        __config__=_STRICT,
        pred_id=(pred_id, ...),
        gt_id=(gt_id, ...),
        reasoning=(str, Field(max_length=limits.reasoning)),
        match_scope=(s.MatchScope, ...),
    )
    error = create_model(
        "GradingError",
        __config__=_STRICT,
        dimension=(s.GradedDimension, ...),
        severity=(s.ErrorSeverity, ...),
        reasoning=(str, Field(min_length=1, max_length=limits.reasoning)),
    )
    return AnswerModels(
        indication=create_model(
            "IndicationAnswer",
            __config__=_STRICT,
            indication=(str, Field(max_length=limits.indication)),
        ),
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
