"""What scoring produces for one pair (docs/scoring.md section 5): the vocabularies.

The result types themselves (`Scores`, `Unit`, ...) live in `radmatch_audit.core.scores`,
below both the scoring core and the record format (which embeds them); they are
re-exported here, the scoring core's own name for them.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Optional, get_args

from radmatch_audit.core.schemas import Significance
from radmatch_audit.core.scores import (  # noqa: F401  (re-exported: the scoring core's result types)
    Attribution,
    Dimension,
    Outcome,
    SafetyRatio,
    Scores,
    SideAttribution,
    Unit,
    UnitError,
    UnitKind,
    UnitRow,
)

# The result vocabularies, defined here once: corpus.py, the dashboard (which embeds
# them in its page) and the benchmarks take them from this module.
OUTCOMES: tuple[str, ...] = get_args(Outcome)
OUTCOME_NAMES = {"COR": "correct", "PAR": "partial", "INC": "incorrect", "MIS": "missed",
                 "SPU": "spurious", "generic": "generic (normal boilerplate)"}
OUTCOME_KEYS: tuple[str, ...] = tuple(outcome.lower() for outcome in OUTCOMES)
OUTCOME_COUNT_KEYS: tuple[str, ...] = (*OUTCOME_KEYS, "generic")  # Scores.outcomes
ERROR_OUTCOMES: tuple[str, ...] = ("INC", "MIS", "SPU")
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


def as_dict(result: Any) -> dict[str, Any]:
    """Any of the result dataclasses as plain JSON-ready data."""
    return asdict(result)


def ratio(num: int, den: int) -> Optional[float]:
    """num/den, or None when the denominator is 0 (undefined, never 0 or 1)."""
    return num / den if den else None
