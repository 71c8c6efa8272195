"""Small builders for findings, matchings and records used across the tests."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from radmatch_audit.core.records import Record, Stages
from radmatch_audit.core.schemas import Finding, GradingStage, MatchingAnswer, MatchRow, Measurement


def m(value: float, unit: str | None, category: str = "size", prior: bool = False) -> Measurement:
    return Measurement(value=value, unit=unit, category=category, prior=prior)


def f(
    id: str,
    status: str = "abnormal",
    sig: str = "routine",
    comparison: str | None = None,
    measurements: list | None = None,
    evidence: list[str] | None = None,
    text: str | None = None,
) -> Finding:
    return Finding(
        id=id,
        text=text or f"Finding {id}.",
        clinical_status=status,
        clinical_significance=sig,
        comparison=comparison,
        measurements=measurements or [],
        evidence=evidence if evidence is not None else [],
    )


def row(pred_id: str, gt_id: str, scope: str = "direct", reasoning: str = "same entity") -> MatchRow:
    return MatchRow(pred_id=pred_id, gt_id=gt_id, match_scope=scope, reasoning=reasoning)


def matching(rows=(), unmatched_pred=(), unmatched_gt=()) -> MatchingAnswer:
    return MatchingAnswer(
        matches=list(rows), unmatched_pred=list(unmatched_pred), unmatched_gt=list(unmatched_gt)
    )


def grading(entries: dict[tuple[str, str], list[tuple[str, str]]]) -> GradingStage:
    """{(pred_id, gt_id): [(dimension, severity), ...]} -> a stored grading stage."""
    return GradingStage(
        pairs=list(entries),
        grades=[
            {"pred_id": p, "gt_id": g,
             "errors": [{"reasoning": f"{d} differs", "dimension": d, "severity": s} for d, s in errs]}
            for (p, g), errs in entries.items()
        ],
    )


def record(
    pair_id: str,
    gt: list[Finding],
    pred: list[Finding],
    match: MatchingAnswer,
    grade: GradingStage | None = None,
    reference: str = "reference text",
    candidate: str = "candidate text",
    error: str | None = None,
) -> Record:
    return Record(
        pair_id=pair_id,
        reference=reference,
        candidate=candidate,
        stages=Stages(
            reference_findings=gt,
            candidate_findings=pred,
            matching=match,
            grading=grade if grade is not None else GradingStage(),
        ),
        error=error,
    )


REFERENCE_FIG3 = (
    "FINDINGS: New large right pleural effusion with underlying atelectasis. "
    "Possible consolidation in the right lower lobe. Small left pleural effusion."
)
CANDIDATE_FIG3 = (
    "FINDINGS: Large right pleural effusion, no significant change. Severe atelectasis. "
    "Pneumonia cannot be excluded. Minimal interval increase of left pleural effusion."
)


def fig3_record(pair_id: str = "fig3") -> Record:
    """The worked example of docs/scoring.md section 5 (paper Fig. 3b)."""
    gt = [
        f("gt_1", sig="urgent", comparison="new", evidence=["New large right pleural effusion"]),
        f("gt_2", sig="notable", evidence=["underlying atelectasis"]),
        f("gt_3", sig="urgent", evidence=["Possible consolidation in the right lower lobe"]),
        f("gt_4", sig="notable", evidence=["Small left pleural effusion"]),
    ]
    pred = [
        f("p_1", sig="urgent", comparison="stable", evidence=["Large right pleural effusion, no significant change"]),
        f("p_2", sig="urgent", evidence=["Severe atelectasis"]),
        f("p_3", sig="urgent", evidence=["Pneumonia cannot be excluded"]),
        f("p_4", sig="notable", comparison="worsening", evidence=["Minimal interval increase of left pleural effusion"]),
    ]
    match = matching([row("p_1", "gt_1"), row("p_2", "gt_2"), row("p_3", "gt_3"), row("p_4", "gt_4")])
    grade = grading(
        {
            ("p_1", "gt_1"): [],
            ("p_2", "gt_2"): [("severity", "major")],
            ("p_3", "gt_3"): [("certainty", "minor")],
            ("p_4", "gt_4"): [("severity", "minor")],
        }
    )
    return record(pair_id, gt, pred, match, grade, REFERENCE_FIG3, CANDIDATE_FIG3)


def adjudicated(
    rec: Record,
    errors: list[int] | None = None,
    unlisted: tuple[str, ...] = (),
    state: str = "current",
) -> Record:
    """The record scored with an error adjudication stage (docs/scoring.md section 5).

    `errors`: each shown unit's count, in the order the stage shows them (default 1
    each); `unlisted`: descriptions of errors no unit holds. `state` "failed" stores a
    failed call, "stale" an answer to units other than those scoring derives now.
    """
    from radmatch_audit.core.schemas import (
        AdjudicationAnswer,
        AdjudicationStage,
        ShownUnit,
        StoredAdjudicatedUnit,
        StoredUnlistedError,
    )
    from radmatch_audit.scoring.adjudication import shown_units
    from radmatch_audit.scoring.record import score_record

    shown = shown_units(score_record(rec).scores.units)
    if state == "stale":
        shown = shown + [ShownUnit(kind="MIS", gt_ids=["gt_gone"])]
    counts = errors if errors is not None else [1] * len(shown)
    if state == "failed":
        stage = AdjudicationStage(units=shown, error="adjudicate: judge returned invalid JSON")
    else:
        stage = AdjudicationStage(units=shown, answer=AdjudicationAnswer(
            units=[StoredAdjudicatedUnit(unit=i, reasoning=f"Unit {i} judged in context.", errors=n)
                   for i, n in enumerate(counts, 1)],
            unlisted=[StoredUnlistedError(description=d) for d in unlisted],
        ))
    stages = rec.stages.model_copy(update={"adjudication": stage})
    return score_record(rec.model_copy(update={"stages": stages, "scores": None}))


def version3_line(rec: Record) -> str:
    """The record as a version-3 line: scored before the error adjudication existed."""
    import json

    data = json.loads(rec.to_json())
    data["schema_version"] = 3
    data["stages"].pop("adjudication", None)
    scores = data.get("scores") or {}
    for key in ("significant_errors", "adjudication", "unlisted_errors"):
        scores.pop(key, None)
    for unit in scores.get("units", []):
        unit.pop("significant_errors", None)
        unit.pop("actionable_errors", None)
    return json.dumps(data)


def write_jsonl(path: Path, rows: Iterable[dict]) -> Path:
    """Write `rows` as JSON lines to `path` and return it."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def mq(value, unit, quantity=None, category="size", prior=False) -> Measurement:
    """A measurement with its clinical quantity (clinical_thresholds.csv), if any."""
    return Measurement(value=value, unit=unit, category=category, prior=prior, quantity=quantity)


def pos(value, unit, quantity=None) -> Measurement:
    """A `position` measurement (a distance such as a tube tip above the carina)."""
    return mq(value, unit, quantity, category="position")


def spu_record(*statuses_and_tiers) -> Record:
    """A record whose candidate findings, one per (status, tier), all go unmatched (SPU)."""
    pred = [f(f"p_{i}", status, tier) for i, (status, tier) in enumerate(statuses_and_tiers, 1)]
    return record("spu", [], pred, matching([], unmatched_pred=[p.id for p in pred]))
