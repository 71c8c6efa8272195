"""The scores of one pair as data: what the scoring core produces and a record embeds.

This module sits below both `radmatch_audit.scoring` (which builds these values) and
`radmatch_audit.core.records` (whose `Record.scores` holds them), so that the record format
does not depend on the scoring core, and the core's `score_record` (which reads and
writes records) can sit above the record format without a circle.

Plain slotted dataclasses: the scoring core builds dozens per pair, and these cost
a fraction of a validated model. Pydantic still validates them when a record is
read (`Record.scores`) and serialises them when it is written, so the record edge
is as strict as before; inside the core they are trusted values. Their vocabularies
as tuples (OUTCOMES, DIMENSIONS, ...) are in `radmatch_audit.scoring.results`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from radmatch_audit.core.schemas import MatchScope

Outcome = Literal["COR", "PAR", "INC", "MIS", "SPU"]
UnitKind = Literal["matched", "mis", "spu", "generic"]
# "current": its answer fits the units scoring derives now; "stale": the units differ
# (a later contract change), so it no longer counts; "failed": its call failed;
# "invalid": a stored answer that does not answer each unit shown once; "off": not run
AdjudicationState = Literal["current", "stale", "failed", "invalid", "off"]
Dimension = Literal[
    "status", "comparison", "measurement", "location", "severity", "morphology", "certainty"
]


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
    # what the unit adds to `actionable_errors`: 0 unless actionable, 1, or for an INC unit
    # with status inversions one per distinct inverted finding (contract 4, 2026-12-05)
    actionable_errors: int = 0
    # the error adjudication's count for the unit (0-5); None when it was not shown the
    # unit (a COR or generic unit) or the adjudication did not run, failed or is stale
    significant_errors: Optional[int] = None


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
    """One report's findings, and how many of them quote text that is found in it."""

    findings: int
    attributed: int


@dataclass(slots=True)
class Attribution:
    """Evidence attribution of both reports (a finding is attributed when its quote is found)."""

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
    # the error adjudication (docs/scoring.md section 5): clinically significant errors in
    # context, None unless `adjudication` is "current"; `unlisted_errors` are those it
    # listed that no unit holds (included in significant_errors)
    significant_errors: Optional[int] = None
    adjudication: AdjudicationState = "off"
    unlisted_errors: int = 0
