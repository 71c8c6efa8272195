"""The stages of one pair, in data-flow order: indication (read by code), extract, match, grade.

Each stage is a small function from typed inputs to the stored stage answer; `ask`
is the judge-call path (`JudgeCalls.ask` bound to the pair and its stage objects). What the judge need not
be asked is not asked: an empty report has no findings, a side without findings has
nothing to match, a matching without gradable rows has nothing to grade.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Optional

from pydantic import BaseModel

from radmatch_audit.core.control_strings import neutralise_markers
from radmatch_audit.stages.indication import cap_indication, read_indication
from radmatch_audit.core.records import Record, Stages
from radmatch_audit.core.schemas import CANONICAL_LIMITS, Finding, GradingStage, Limits, MatchingAnswer, number_findings
from radmatch_audit.scoring.repair import repair_matching
from radmatch_audit.stages.prompt import finding_view

Ask = Callable[..., Awaitable[BaseModel]]  # ask(stage, user_input, rows=None): rows sent to grading


def find_indication(
    reference: str, given: Optional[str], max_chars: Optional[int] = None
) -> tuple[Optional[str], bool]:
    """A given indication, trimmed; else the reference's own indication section, read by
    code and cut at a word to `max_chars`. Also whether it was cut."""
    if given is not None:
        return given.strip() or None, False
    read = read_indication(reference)
    return (None, False) if read is None else cap_indication(read, max_chars)


async def extract_findings(report: str, indication: Optional[str], ask: Ask, prefix: str) -> list[Finding]:
    """The report's atomic findings, numbered `prefix_1`, ... in the judge's order."""
    if not report.strip():  # an empty report states nothing: no call
        return []
    answer = await ask("extract", {"report": report, "indication": indication})
    return number_findings(answer.findings, prefix)


async def match_findings(
    reference: list[Finding], candidate: list[Finding], indication: Optional[str], ask: Ask
) -> tuple[MatchingAnswer, bool]:
    """The judge's matching as given (before repair), and whether the judge was asked."""
    if not reference or not candidate:  # nothing to align: every finding is unmatched
        unmatched = MatchingAnswer(
            matches=[], unmatched_pred=[f.id for f in candidate], unmatched_gt=[f.id for f in reference]
        )
        return unmatched, False
    answer = await ask("match", {
        "indication": indication,
        "gt_findings": [finding_view(f) for f in reference],
        "pred_findings": [finding_view(f) for f in candidate],
    })
    return MatchingAnswer.model_validate(answer.model_dump()), True


def rows_to_grade(matching: MatchingAnswer, reference: list[Finding], candidate: list[Finding]) -> list[tuple[str, str]]:
    """The (pred, gt) rows the grader sees: the repaired matching's, generic rows left out."""
    repaired = repair_matching(matching, [f.id for f in candidate], [f.id for f in reference])
    return [(r.pred_id, r.gt_id) for r in repaired.rows if r.match_scope != "generic"]


async def grade_rows(
    rows: list[tuple[str, str]], findings: dict[str, Finding], indication: Optional[str], ask: Ask
) -> GradingStage:
    """One batched call grading the free-text attributes of every row, keyed by the rows' ids."""
    if not rows:
        return GradingStage()
    answer = await ask("grade", {
        "indication": indication,
        "pairs": [
            {"pred_finding": finding_view(findings[p]), "gt_finding": finding_view(findings[g])}
            for p, g in rows
        ],
    }, rows=rows)
    return GradingStage(pairs=rows, grades=[entry.model_dump() for entry in answer.grades])


async def run_stages(record: Record, ask: Ask, limits: Limits, tokens: tuple[str, ...] = ()) -> None:
    """Fill `record.stages` (and its flags) stage by stage; a stage's failure propagates.
    `tokens` are the judge's own special tokens (`control_strings.control_tokens`).

    Each stage is stored as soon as it is done, so a failed pair keeps what finished.
    """
    stages: Stages = record.stages
    cap = limits.tightest(CANONICAL_LIMITS).indication
    stages.indication, cut = find_indication(record.reference, record.indication, cap)
    if cut:
        record.flags.append(f"indication read from the reference cut to {cap} characters")
    for field, text in (("reference", record.reference), ("candidate", record.candidate),
                        ("indication", stages.indication)):
        markers = neutralise_markers(text, tokens)[1] if text else 0
        if markers:  # Prompt.messages sends them as plain text; the record keeps the original
            record.flags.append(f"{field}: {markers} control marker(s) sent to the judge as plain text")
    reference, candidate = await asyncio.gather(
        extract_findings(record.reference, stages.indication, ask, "gt"),
        extract_findings(record.candidate, stages.indication, ask, "p"),
    )
    stages.reference_findings, stages.candidate_findings = reference, candidate
    for side, found in (("reference", reference), ("candidate", candidate)):
        if limits.findings and len(found) >= limits.findings:
            record.flags.append(f"{side}_findings reached the cap of {limits.findings}")

    stages.matching, asked = await match_findings(reference, candidate, stages.indication, ask)
    if not asked:
        record.flags.append("matching: no judge call, one side has no findings")
    elif limits.rows and len(stages.matching.matches) >= limits.rows:
        record.flags.append(f"matching reached the cap of {limits.rows} rows")

    rows = rows_to_grade(stages.matching, reference, candidate)
    findings: dict[str, Any] = {f.id: f for f in reference + candidate}
    stages.grading = await grade_rows(rows, findings, stages.indication, ask)
