"""The error adjudication (docs/judge.md rule 28): one call per pair, after scoring.

The judge sees the indication, both reports and every unit that scoring did not call
correct (MIS, SPU, INC, PAR: its findings' texts on each side and, for INC and PAR,
what differs; never its tier), and says for each how many clinically significant
errors it holds in context; it may list significant errors that no unit holds. The
answer is stored with the units it was shown (`schemas.AdjudicationStage`), and the
scoring core makes `significant_errors` of it (`scoring.adjudication`).

A pair with no such unit needs no call. A failed call fails this stage only: the
record keeps its other scores, and `significant_errors` is null.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from radmatch_audit.core.records import Record
from radmatch_audit.core.schemas import AdjudicationAnswer, AdjudicationStage, Finding
from radmatch_audit.core.scores import Unit
from radmatch_audit.scoring.adjudication import adjudicated, shown_units

Ask = Callable[..., Awaitable[Any]]


def unit_views(units: list[Unit], findings: dict[str, Finding]) -> list[dict[str, Any]]:
    """The shown units as the judge reads them, numbered from 1 (no tiers)."""
    views = []
    for unit in adjudicated(units):
        views.append({
            "unit": len(views) + 1,
            "kind": unit.outcome,
            "reference_findings": [findings[i].text for i in unit.gt_ids],
            "candidate_findings": [findings[i].text for i in unit.pred_ids],
            "differences": [f"{e.dimension}: {e.reasoning}" if e.reasoning else e.dimension
                            for e in unit.errors],
        })
    return views


def adjudication_input(record: Record) -> tuple[dict[str, Any], AdjudicationStage]:
    """The user message of a scored record's adjudication, and the stage it will fill."""
    stages = record.stages
    findings = {f.id: f for f in (stages.reference_findings or []) + (stages.candidate_findings or [])}
    units = record.scores.units
    user = {
        "indication": stages.indication,
        "reference": record.reference,
        "candidate": record.candidate,
        "units": unit_views(units, findings),
    }
    return user, AdjudicationStage(units=shown_units(units))


async def adjudicate(record: Record, ask: Ask) -> AdjudicationStage:
    """The adjudication of a scored record; its failure is raised (StageFailed)."""
    user, stage = adjudication_input(record)
    if not stage.units:  # nothing differs: no call, no error
        stage.answer = AdjudicationAnswer()
        return stage
    answer = await ask("adjudicate", user, rows=len(stage.units))
    stage.answer = AdjudicationAnswer.model_validate(answer.model_dump())
    return stage


def adjudication_failed(record: Record, error: str) -> AdjudicationStage:
    """The stage of an adjudication that failed: the units it was to be shown, the error."""
    return AdjudicationStage(units=shown_units(record.scores.units), error=error)
