"""The error adjudication's count from its stored answer (docs/scoring.md section 5).

Pure like the rest of the core. The adjudication was shown every unit whose outcome is
not COR (`shown_units`), numbered from 1 in the order scoring lists them, and answered
how many clinically significant errors each holds. Its count stands only while the
units scoring derives now are the units it was shown: a recompute under a later
contract that changes them marks it stale, and it is never realigned by position.
"""

from __future__ import annotations

from typing import Optional

from radmatch_audit.core.schemas import AdjudicationStage, ShownUnit
from radmatch_audit.core.scores import AdjudicationState, Unit
from radmatch_audit.core.vocabulary import MAX_UNIT_ERRORS

ADJUDICATED_OUTCOMES = frozenset({"MIS", "SPU", "INC", "PAR"})


def shown_units(units: list[Unit]) -> list[ShownUnit]:
    """The units the adjudication is shown: every unit with an outcome other than COR."""
    return [
        ShownUnit(kind=unit.outcome, gt_ids=list(unit.gt_ids), pred_ids=list(unit.pred_ids))
        for unit in units
        if unit.outcome in ADJUDICATED_OUTCOMES
    ]


def adjudicated_counts(
    units: list[Unit], adjudication: Optional[AdjudicationStage], repairs: list[str]
) -> tuple[Optional[int], AdjudicationState, int]:
    """(significant_errors, the adjudication's state, unlisted errors); each shown unit's
    `significant_errors` is set when the adjudication stands."""
    if adjudication is None:
        return None, "off", 0
    if adjudication.error is not None or adjudication.answer is None:
        return None, "failed", 0
    now = shown_units(units)
    if sorted(u.key() for u in now) != sorted(u.key() for u in adjudication.units):
        repairs.append(
            "adjudication is stale: the units scoring derives now differ from the "
            f"{len(adjudication.units)} it was shown; significant_errors is null"
        )
        return None, "stale", 0
    answer = adjudication.answer
    by_number = {}
    for entry in answer.units:
        if entry.unit in by_number or not 1 <= entry.unit <= len(adjudication.units) \
                or not 0 <= entry.errors <= MAX_UNIT_ERRORS:
            by_number = None
            break
        by_number[entry.unit] = entry.errors
    if by_number is None or len(by_number) != len(adjudication.units):
        repairs.append("adjudication answer does not answer each unit shown exactly once with "
                       f"0-{MAX_UNIT_ERRORS} errors; significant_errors is null")
        return None, "invalid", 0
    count_of = {shown.key(): by_number[number] for number, shown in enumerate(adjudication.units, 1)}
    for unit in units:
        if unit.outcome in ADJUDICATED_OUTCOMES:
            unit.significant_errors = count_of[ShownUnit(
                kind=unit.outcome, gt_ids=unit.gt_ids, pred_ids=unit.pred_ids).key()]
    unlisted = len(answer.unlisted)
    return sum(by_number.values()) + unlisted, "current", unlisted
