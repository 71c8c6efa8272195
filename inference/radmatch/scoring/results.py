"""Models of what scoring produces for one pair (SCORING.md section 5)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from radmatch.schemas import MatchScope

Outcome = Literal["COR", "PAR", "INC", "MIS", "SPU"]
UnitKind = Literal["matched", "mis", "spu", "generic"]
Dimension = Literal[
    "status", "comparison", "measurement", "location", "severity", "morphology", "certainty"
]
DIMENSIONS: tuple[str, ...] = (
    "status",
    "comparison",
    "measurement",
    "location",
    "severity",
    "morphology",
    "certainty",
)
OUTCOME_KEYS: tuple[str, ...] = ("cor", "par", "inc", "mis", "spu")
SUBSETS: tuple[str, ...] = ("normal", "abnormal", "comparison", "measurement")
SAFETY_TIERS: tuple[str, ...] = ("triage", "actionable", "all")

_CFG = ConfigDict(extra="ignore")


class UnitError(BaseModel):
    model_config = _CFG

    dimension: Dimension
    severity: Literal["major", "minor"]
    source: Literal["deterministic", "judge"]
    pred_id: Optional[str] = None
    gt_id: Optional[str] = None
    reasoning: str = ""


class UnitRow(BaseModel):
    model_config = _CFG

    pred_id: str
    gt_id: str
    match_scope: MatchScope


class Unit(BaseModel):
    model_config = _CFG

    kind: UnitKind
    gt_ids: list[str]
    pred_ids: list[str]
    rows: list[UnitRow] = Field(default_factory=list)
    outcome: Optional[Outcome]
    tier: str
    actionable: bool
    errors: list[UnitError] = Field(default_factory=list)


class SafetyRatio(BaseModel):
    """Precision and recall at one tier threshold; a ratio over 0 is None."""

    model_config = _CFG

    precision: Optional[float]
    recall: Optional[float]
    precision_num: int
    precision_den: int
    recall_num: int
    recall_den: int


class SideAttribution(BaseModel):
    model_config = _CFG

    findings: int
    attributed: int


class Attribution(BaseModel):
    model_config = _CFG

    reference: SideAttribution
    candidate: SideAttribution


class Scores(BaseModel):
    model_config = _CFG

    actionable_errors: int
    outcomes: dict[str, int]
    safety: dict[str, SafetyRatio]
    attribution: Attribution
    attributes: dict[str, dict[str, int]]
    subsets: dict[str, dict[str, int]]
    units: list[Unit]


def ratio(num: int, den: int) -> Optional[float]:
    """num/den, or None when the denominator is 0 (undefined, never 0 or 1)."""
    return num / den if den else None
