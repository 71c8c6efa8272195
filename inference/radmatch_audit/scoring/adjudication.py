"""The error adjudication's count from its stored answer (docs/scoring.md section 5).

Pure like the rest of the core. The adjudication was shown every unit whose outcome is
not COR (`shown_units`), numbered from 1 in the order scoring lists them, and answered
how many clinically significant errors each holds. Its count stands only while the
units scoring derives now are the units it was shown: a recompute under a later
contract that changes them marks it stale, and it is never realigned by position.
"""

from __future__ import annotations

from typing import Optional

from radmatch_audit.core.schemas import AdjudicationStage, ShownUnit, adjudication_units_problem
from radmatch_audit.core.scores import AdjudicationState, Unit
from radmatch_audit.core.vocabulary import MAX_UNIT_ERRORS

ADJUDICATED_OUTCOMES = frozenset({"MIS", "SPU", "INC", "PAR"})


def adjudicated(units: list[Unit]) -> list[Unit]:
    """The units the adjudication is shown, in scoring's order: every unit with an
    outcome other than COR (generic units have none)."""
    return [unit for unit in units if unit.outcome in ADJUDICATED_OUTCOMES]


def shown_units(units: list[Unit]) -> list[ShownUnit]:
    """The units the adjudication is shown, as its stage stores them."""
    return [
        ShownUnit(kind=unit.outcome, gt_ids=list(unit.gt_ids), pred_ids=list(unit.pred_ids))
        for unit in adjudicated(units)
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
    now = adjudicated(units)
    keys = [shown.key() for shown in shown_units(now)]
    if sorted(keys) != sorted(u.key() for u in adjudication.units):
        repairs.append(
            "adjudication is stale: the units scoring derives now differ from the "
            f"{len(adjudication.units)} it was shown; significant_errors is null"
        )
        return None, "stale", 0
    answer = adjudication.answer
    # a stored answer is held to what was checked when it arrived (a hand-made one may not be)
    if adjudication_units_problem([e.unit for e in answer.units], len(adjudication.units)) or any(
        not 0 <= e.errors <= MAX_UNIT_ERRORS for e in answer.units
    ):
        repairs.append("adjudication answer does not answer each unit shown exactly once with "
                       f"0-{MAX_UNIT_ERRORS} errors; significant_errors is null")
        return None, "invalid", 0
    by_number = {entry.unit: entry.errors for entry in answer.units}
    count_of = {shown.key(): by_number[number] for number, shown in enumerate(adjudication.units, 1)}
    for unit, key in zip(now, keys):
        unit.significant_errors = count_of[key]
    unlisted = len(answer.unlisted)
    return sum(by_number.values()) + unlisted, "current", unlisted
