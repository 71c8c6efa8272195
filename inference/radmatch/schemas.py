"""Pydantic models for every stage answer and for the findings kept in records.

Two families share the field definitions:

* **Judge-facing answers** (`*Answer`, `*Out`): strict (`extra="forbid"`, enums, bounded
  lists and strings). Their JSON schemas are what constrained decoding enforces, and
  every judge answer is re-validated by the same model.
* **Stored stages** (`Finding`, `GradingStage`, ...): what a record keeps. Findings carry
  the pipeline's ids; stored grading accepts any string as dimension or severity
  (RECORDS.md), so an old or hand-made record still scores.

List caps follow JUDGE.md rule 8: a small model that never closes a list still yields
valid JSON within its token budget; the pipeline flags a report that hits a cap.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

ClinicalStatus = Literal["normal", "abnormal"]
Significance = Literal["critical", "urgent", "notable", "routine"]
Comparison = Literal["stable", "improving", "worsening", "new", "resolved"]
MeasurementCategory = Literal["size", "count", "attenuation", "ratio", "other"]
MatchScope = Literal["direct", "aggregate", "generic"]
GradedDimension = Literal["location", "severity", "morphology", "certainty", "measurement"]
ErrorSeverity = Literal["major", "minor"]

MAX_FINDINGS = 60
MAX_MATCH_ROWS = 200
MAX_MEASUREMENTS = 12
MAX_EVIDENCE = 4
MAX_ERRORS_PER_MATCH = 5
MAX_TEXT = 400
MAX_REASONING = 300
MAX_ID = 12

_STRICT = ConfigDict(extra="forbid")
_LENIENT = ConfigDict(extra="ignore")


# --------------------------------------------------------------------------- findings


class MeasurementOut(BaseModel):
    """One numeric value of a finding (value, unit, category, prior)."""

    model_config = _STRICT

    value: float
    unit: Optional[str] = Field(default=None, max_length=24)
    category: MeasurementCategory
    prior: bool = False


class FindingOut(BaseModel):
    """One atomic finding as the extraction stage returns it (no id yet)."""

    model_config = _STRICT

    text: str = Field(min_length=1, max_length=MAX_TEXT)
    clinical_status: ClinicalStatus
    clinical_significance: Significance
    comparison: Optional[Comparison] = None
    measurements: list[MeasurementOut] = Field(default_factory=list, max_length=MAX_MEASUREMENTS)
    evidence: list[str] = Field(default_factory=list, max_length=MAX_EVIDENCE)


class ExtractionAnswer(BaseModel):
    """Answer of the extraction stage for one report."""

    model_config = _STRICT

    findings: list[FindingOut] = Field(max_length=MAX_FINDINGS)


class IndicationAnswer(BaseModel):
    """Answer of the optional indication stage: verbatim text, possibly empty."""

    model_config = _STRICT

    indication: str = Field(max_length=2000)


class Measurement(MeasurementOut):
    model_config = _LENIENT


class Finding(FindingOut):
    """A finding as stored in a record: the judge's answer plus the pipeline's id."""

    model_config = _LENIENT

    id: str = Field(min_length=1)
    measurements: list[Measurement] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    text: str = Field(min_length=1)


def number_findings(findings: list[FindingOut], prefix: str) -> list[Finding]:
    """Give findings the pipeline's ids (`gt_1`, ... or `p_1`, ...) in judge order."""
    return [
        Finding(id=f"{prefix}_{i}", **finding.model_dump()) for i, finding in enumerate(findings, 1)
    ]


# --------------------------------------------------------------------------- matching


class MatchRow(BaseModel):
    """One (pred, gt) binding. Field order is generation order: reasoning before scope."""

    model_config = _STRICT

    pred_id: str = Field(max_length=MAX_ID)
    gt_id: str = Field(max_length=MAX_ID)
    reasoning: str = Field(default="", max_length=MAX_REASONING)
    match_scope: MatchScope


class MatchingAnswer(BaseModel):
    """Answer of the matching stage, stored in records as given (before repair)."""

    model_config = _STRICT

    matches: list[MatchRow] = Field(max_length=MAX_MATCH_ROWS)
    unmatched_pred: list[str] = Field(max_length=MAX_FINDINGS)
    unmatched_gt: list[str] = Field(max_length=MAX_FINDINGS)


# --------------------------------------------------------------------------- grading


class GradingErrorOut(BaseModel):
    """One free-text attribute error of a graded row (decoding schema: strict)."""

    model_config = _STRICT

    dimension: GradedDimension
    severity: ErrorSeverity
    reasoning: str = Field(min_length=1, max_length=MAX_REASONING)


class GradingAnswer(BaseModel):
    """Answer of the grading stage: one error list per row sent, in order."""

    model_config = _STRICT

    errors_per_match: list[list[GradingErrorOut]] = Field(max_length=MAX_MATCH_ROWS)


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
