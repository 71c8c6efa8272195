"""What scoring produces for one pair (docs/scoring.md section 5).

Plain slotted dataclasses: the scoring core builds dozens per pair, and these cost
a fraction of a validated model. Pydantic still validates them when a record is
read (`Record.scores`) and serialises them when it is written, so the record edge
is as strict as before; inside the core they are trusted values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Optional, get_args

from radmatch_audit.schemas import MatchScope, Significance

# The result vocabularies, defined here once: corpus.py, the dashboard (which embeds
# them in its page) and the benchmarks take them from this module.
Outcome = Literal["COR", "PAR", "INC", "MIS", "SPU"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
OUTCOME_NAMES = {"COR": "correct", "PAR": "partial", "INC": "incorrect", "MIS": "missed",
                 "SPU": "spurious", "generic": "generic (normal boilerplate)"}
OUTCOME_KEYS: tuple[str, ...] = tuple(outcome.lower() for outcome in OUTCOMES)
OUTCOME_COUNT_KEYS: tuple[str, ...] = (*OUTCOME_KEYS, "generic")  # Scores.outcomes
ERROR_OUTCOMES: tuple[str, ...] = ("INC", "MIS", "SPU")
UnitKind = Literal["matched", "mis", "spu", "generic"]
Dimension = Literal[
    "status", "comparison", "measurement", "location", "severity", "morphology", "certainty"
]
DIMENSIONS: tuple[str, ...] = get_args(Dimension)
SEVERITY_LEVELS: tuple[str, ...] = ("none", "minor", "major")  # worst error in a dimension
SUBSETS: tuple[str, ...] = ("normal", "abnormal", "comparison", "measurement")
SIGNIFICANCE_TIERS: tuple[str, ...] = get_args(Significance)  # most urgent first
# the safety tier sets, each a threshold on a finding's own significance tier
SAFETY_TIER_SETS: dict[str, tuple[str, ...]] = {
    "triage": ("critical", "urgent"),
    "actionable": ("critical", "urgent", "notable"),
    "all": SIGNIFICANCE_TIERS,
}
SAFETY_TIERS: tuple[str, ...] = tuple(SAFETY_TIER_SETS)
ACTIONABLE_TIERS = SAFETY_TIER_SETS["actionable"]  # an error unit at these tiers is actionable


def vocabularies() -> dict[str, Any]:
    """Every vocabulary above as JSON-ready data (what the dashboard page embeds)."""
    return {
        "outcomes": list(OUTCOMES),
        "outcome_names": dict(OUTCOME_NAMES),
        "error_outcomes": list(ERROR_OUTCOMES),
        "dimensions": list(DIMENSIONS),
        "severity_levels": list(SEVERITY_LEVELS),
        "subsets": list(SUBSETS),
        "significance_tiers": list(SIGNIFICANCE_TIERS),
        "safety_tiers": {name: list(tiers) for name, tiers in SAFETY_TIER_SETS.items()},
        "actionable_tiers": list(ACTIONABLE_TIERS),
    }


@dataclass(slots=True)
class UnitError:
    dimension: Dimension
    severity: Literal["major", "minor"]
    source: Literal["deterministic", "judge"]
    pred_id: Optional[str] = None
    gt_id: Optional[str] = None
    reasoning: str = ""


@dataclass(slots=True)
class UnitRow:
    pred_id: str
    gt_id: str
    match_scope: MatchScope


@dataclass(slots=True)
class Unit:
    kind: UnitKind
    gt_ids: list[str]
    pred_ids: list[str]
    rows: list[UnitRow]  # a matched unit's repaired rows; empty for the other kinds
    outcome: Optional[Outcome]
    tier: str
    actionable: bool
    errors: list[UnitError]


@dataclass(slots=True)
class SafetyRatio:
    """Precision and recall at one tier threshold; a ratio over 0 is None."""

    precision: Optional[float]
    recall: Optional[float]
    precision_num: int
    precision_den: int
    recall_num: int
    recall_den: int


@dataclass(slots=True)
class SideAttribution:
    findings: int
    attributed: int


@dataclass(slots=True)
class Attribution:
    reference: SideAttribution
    candidate: SideAttribution


@dataclass(slots=True)
class Scores:
    actionable_errors: int
    outcomes: dict[str, int]
    safety: dict[str, SafetyRatio]
    attribution: Attribution
    attributes: dict[str, dict[str, int]]
    subsets: dict[str, dict[str, int]]
    units: list[Unit]


def as_dict(result: Any) -> dict[str, Any]:
    """Any of the result dataclasses as plain JSON-ready data."""
    return asdict(result)


def ratio(num: int, den: int) -> Optional[float]:
    """num/den, or None when the denominator is 0 (undefined, never 0 or 1)."""
    return num / den if den else None
