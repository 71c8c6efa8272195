"""Scores of one pair from its stage answers (docs/scoring.md sections 4-5): findings,
matching and grading, and the error adjudication when it ran.

Pure: findings, matching and grading in, `Scores` and repair notes out. No I/O, no
judge, no clock. `score_record` applies it to a stored record (what recompute runs).
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Iterable
from typing import Optional

from radmatch_audit.core.control_strings import restore_markers
from radmatch_audit.core.schemas import AdjudicationStage, Finding, GradingStage, MatchingAnswer, Measurement
from radmatch_audit.scoring.adjudication import adjudicated_counts
from radmatch_audit.scoring.comparators import comparison_error, measurement_errors, status_error
from radmatch_audit.scoring.repair import repair_matching
from radmatch_audit.scoring.results import (
    ACTIONABLE_TIERS,
    DIMENSIONS,
    ERROR_OUTCOMES,
    OUTCOME_COUNT_KEYS,
    OUTCOME_KEYS,
    OUTCOMES,
    SAFETY_TIER_SETS,
    SEVERITY_LEVELS,
    SUBSETS,
    Attribution,
    SafetyRatio,
    Scores,
    SideAttribution,
    Unit,
    UnitError,
    ratio,
)
from radmatch_audit.scoring.units import build_units

TIER_SETS = {name: frozenset(tiers) for name, tiers in SAFETY_TIER_SETS.items()}
ERRORS = frozenset(ERROR_OUTCOMES)
ACTIONABLE = frozenset(ACTIONABLE_TIERS)
CREDITED_OUTCOMES = frozenset(OUTCOMES) - ERRORS
JUDGE_DIMENSIONS = frozenset({"location", "severity", "morphology", "certainty", "measurement"})
SEVERITIES = frozenset({"major", "minor"})
OUTCOME_KEY = {**dict(zip(OUTCOMES, OUTCOME_KEYS)), None: "generic"}


def score_pair(
    reference_findings: list[Finding],
    candidate_findings: list[Finding],
    matching: MatchingAnswer,
    grading: Optional[GradingStage],
    *,
    reference_text: str,
    candidate_text: str,
    adjudication: Optional[AdjudicationStage] = None,
) -> tuple[Scores, list[str]]:
    """Score one pair; return the scores and the repairs made on the way.

    `adjudication`, the stored error adjudication, gives `significant_errors` when the
    units it was shown are the units derived here (section 5)."""
    gt = _index(reference_findings, "reference_findings")
    pred = _index(candidate_findings, "candidate_findings")
    repaired = repair_matching(matching, list(pred), list(gt))
    repairs = repaired.repairs

    units = build_units(repaired, gt, pred)
    strong_rows = {(r.pred_id, r.gt_id) for u in units for r in u.rows}
    judge_errors = _judge_errors(grading, strong_rows, repairs)

    actionable_errors = 0
    for unit in units:
        if unit.kind == "matched":
            _compare_matched(unit, gt, pred, judge_errors)
        # section 5: an error unit at an actionable tier counts, except an unaddressed negative
        if (
            unit.outcome in ERRORS
            and unit.tier in ACTIONABLE
            and not is_unaddressed_negative(unit, pred)
        ):
            unit.actionable = True
            unit.actionable_errors = inverted_findings(unit) or 1
            actionable_errors += unit.actionable_errors
    significant_errors, adjudication_state, unlisted = adjudicated_counts(units, adjudication, repairs)

    scores = Scores(
        actionable_errors=actionable_errors,
        outcomes=_outcome_counts(units),
        safety=_safety(units, gt, pred),
        attribution=Attribution(
            reference=_attribution(reference_findings, reference_text),
            candidate=_attribution(candidate_findings, candidate_text),
        ),
        attributes=_attribute_breakdown(units),
        subsets=_subsets(units, gt, pred),
        units=units,
        significant_errors=significant_errors,
        adjudication=adjudication_state,
        unlisted_errors=unlisted,
    )
    return scores, repairs


def inverted_findings(unit: Unit) -> int:
    """Distinct status-inverted findings of a unit (section 5, ours, 2026-12-05):
    max(distinct pred ids, distinct gt ids) over its rows with a status error; 0 if none.

    "Lungs are clear." bound to two invented consolidations is two errors, not one.
    """
    preds = {e.pred_id for e in unit.errors if e.dimension == "status"}
    gts = {e.gt_id for e in unit.errors if e.dimension == "status"}
    return max(len(preds), len(gts))


def is_unaddressed_negative(unit: Unit, pred: dict[str, Finding]) -> bool:
    """An SPU unit whose candidate findings are all `normal` (section 5, ours, 2026-12-02).

    "No pneumothorax." against a reference silent on pneumothorax does not contradict
    it: the unit stays SPU (outcome counts, safety precision) but is never actionable.
    """
    return unit.outcome == "SPU" and all(
        pred[i].clinical_status == "normal" for i in unit.pred_ids
    )


def _index(findings: list[Finding], field: str) -> dict[str, Finding]:
    table = {finding.id: finding for finding in findings}
    if len(table) != len(findings):
        seen: set[str] = set()
        for finding in findings:
            if finding.id in seen:
                raise ValueError(f"{field}: duplicate finding id {finding.id!r}")
            seen.add(finding.id)
    return table


def _judge_errors(
    grading: Optional[GradingStage], strong_rows: set[tuple[str, str]], repairs: list[str]
) -> dict[tuple[str, str], list[UnitError]]:
    """Judge attribute errors by (pred_id, gt_id), dropping what the contract ignores."""
    found: dict[tuple[str, str], list[UnitError]] = {}
    for pred_id, gt_id, entries in grading.entries() if grading else ():
        key = (pred_id, gt_id)
        if key not in strong_rows:
            repairs.append(
                f"ignored grading of {pred_id}-{gt_id}: not a direct/aggregate row after repair"
            )
            continue
        kept = found.get(key)
        if kept is None:
            kept = found[key] = []
        else:
            repairs.append(f"row {pred_id}-{gt_id} was graded more than once: errors merged")
        for entry in entries:
            if entry.dimension not in JUDGE_DIMENSIONS or entry.severity not in SEVERITIES:
                repairs.append(
                    f"ignored grading error on {pred_id}-{gt_id}: "
                    f"dimension {entry.dimension!r}, severity {entry.severity!r}"
                )
                continue
            error = UnitError(entry.dimension, entry.severity, "judge", pred_id, gt_id, entry.reasoning)
            if error not in kept:
                kept.append(error)
    for kept in found.values():  # canonical order: scores never depend on answer order
        if len(kept) > 1:
            kept.sort(key=_judge_error_key)
    if len(found) < len(strong_rows):
        for pred_id, gt_id in sorted(strong_rows.difference(found)):
            repairs.append(
                f"row {pred_id}-{gt_id} has no grading entry: scored on deterministic errors alone"
            )
    return found


def _judge_error_key(error: UnitError) -> tuple[str, str, str]:
    return (error.dimension, error.severity, error.reasoning)


def _compare_matched(
    unit: Unit,
    gt: dict[str, Finding],
    pred: dict[str, Finding],
    judge_errors: dict[tuple[str, str], list[UnitError]],
) -> None:
    """Fill in a matched unit's errors, in row order, and its outcome [3.3]."""
    errors = unit.errors
    for row in unit.rows:
        p, g = pred[row.pred_id], gt[row.gt_id]
        if p.clinical_status != g.clinical_status:
            errors.append(status_error(p, g))
        if p.comparison != g.comparison:
            errors.append(comparison_error(p, g))
        judged = judge_errors.get((row.pred_id, row.gt_id))
        if judged:
            errors.extend(judged)
    reference_values = _pooled_measurements(unit.gt_ids, gt)
    candidate_values = _pooled_measurements(unit.pred_ids, pred)
    if reference_values or candidate_values:
        errors.extend(measurement_errors(reference_values, candidate_values))
    if not errors:
        unit.outcome = "COR"
    elif any(e.severity == "major" for e in errors):
        unit.outcome = "INC"
    else:
        unit.outcome = "PAR"


def _pooled_measurements(ids: list[str], findings: dict[str, Finding]) -> list[Measurement]:
    if len(ids) == 1:
        return findings[ids[0]].measurements
    return [m for i in ids for m in findings[i].measurements]


def _outcome_counts(units: list[Unit]) -> dict[str, int]:
    counts = dict.fromkeys(OUTCOME_COUNT_KEYS, 0)
    for unit in units:
        counts[OUTCOME_KEY[unit.outcome]] += 1
    return counts


def _safety(
    units: list[Unit], gt: dict[str, Finding], pred: dict[str, Finding]
) -> dict[str, SafetyRatio]:
    """Recall over reference findings and precision over candidate findings, per tier set.

    A finding counts by its own tier; it is credited when its unit is COR or PAR.
    """
    # per tier: recall num/den, precision num/den; tier sets add up their tiers
    by_tier = {tier: [0, 0, 0, 0] for tier in TIER_SETS["all"]}
    for unit in units:  # every finding is in exactly one unit
        credited = unit.outcome in CREDITED_OUTCOMES
        for finding_id in unit.gt_ids:
            counts = by_tier[gt[finding_id].clinical_significance]
            counts[0] += credited
            counts[1] += 1
        for finding_id in unit.pred_ids:
            counts = by_tier[pred[finding_id].clinical_significance]
            counts[2] += credited
            counts[3] += 1
    safety = {}
    for name, tiers in TIER_SETS.items():
        r_num = r_den = p_num = p_den = 0
        for tier in tiers:
            counts = by_tier[tier]
            r_num += counts[0]
            r_den += counts[1]
            p_num += counts[2]
            p_den += counts[3]
        safety[name] = SafetyRatio(
            precision=ratio(p_num, p_den),
            recall=ratio(r_num, r_den),
            precision_num=p_num,
            precision_den=p_den,
            recall_num=r_num,
            recall_den=r_den,
        )
    return safety


def normalise_text(text: str) -> str:
    """NFC, whitespace collapsed, case folded: how evidence is compared with the report."""
    if not text.isascii():  # NFC changes nothing in ASCII text
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split()).casefold()


def normalise_with_positions(text: str) -> tuple[str, tuple[int, ...]]:
    """`normalise_text` that remembers where each character came from.

    Returns the normalised text, except that whitespace at either end is kept (as one
    space), and for each of its characters the index in the NFC form of `text` it
    came from: a quote found in the first maps back to a span of the report.
    """
    out: list[str] = []
    index: list[int] = []
    in_space = False
    for i, ch in enumerate(unicodedata.normalize("NFC", text)):
        if ch.isspace():
            if not in_space:
                out.append(" ")
                index.append(i)
            in_space = True
            continue
        in_space = False
        for folded in ch.casefold():
            out.append(folded)
            index.append(i)
    return "".join(out), tuple(index)


def _attribution(findings: list[Finding], report: str) -> SideAttribution:
    attributes = QuoteFinder(report).attributes
    attributed = 0
    for finding in findings:
        if attributes(finding.evidence):
            attributed += 1
    return SideAttribution(findings=len(findings), attributed=attributed)


class QuoteFinder:
    """Finds evidence quotes in one report, compared after `normalise_text`: the
    attribution rule, for the scores and for the dashboard's "Evidence not found"."""

    __slots__ = ("report", "verbatim", "_haystack")

    def __init__(self, report: str) -> None:
        self.report = report
        # In ASCII, a quote found as is is also found after normalising both sides
        # (whitespace runs inside a quote are whole runs of the report; case folding
        # maps character by character), so the normalised search is only a fallback.
        self.verbatim = report.isascii()
        self._haystack: Optional[str] = None

    def _found(self, quote: str) -> bool:
        if self.verbatim and quote in self.report:
            return True
        if self._haystack is None:
            self._haystack = normalise_text(self.report)
        return normalise_text(quote) in self._haystack

    def attributes(self, evidence: list[str]) -> bool:
        """At least one non-empty quote, and every non-empty quote found in the report."""
        found = False
        for quote in evidence:
            if not quote or quote.isspace():  # empty once normalised
                continue
            if not self._found(quote):
                # the judge saw control markers as plain text (radmatch_audit.core.control_strings)
                restored = restore_markers(quote)
                if restored is quote or not self._found(restored):
                    return False
            found = True
        return found


def _attribute_breakdown(units: list[Unit]) -> dict[str, dict[str, int]]:
    """Each matched unit counted once per dimension, by its worst error there."""
    table = {dim: dict.fromkeys(SEVERITY_LEVELS, 0) for dim in DIMENSIONS}
    matched = 0
    for unit in units:
        if unit.kind != "matched":
            continue
        matched += 1
        worst: dict[str, str] = {}
        for error in unit.errors:
            if error.severity == "major" or error.dimension not in worst:
                worst[error.dimension] = error.severity
        for dim, severity in worst.items():
            table[dim][severity] += 1
    for counts in table.values():  # a matched unit with no error in a dimension: none
        counts["none"] = matched - counts["minor"] - counts["major"]
    return table


def _subsets(
    units: list[Unit], gt: dict[str, Finding], pred: dict[str, Finding]
) -> dict[str, dict[str, int]]:
    table = {name: dict.fromkeys((*OUTCOME_KEYS, "actionable_errors"), 0) for name in SUBSETS}
    for unit in units:
        members = itertools.chain(
            map(gt.__getitem__, unit.gt_ids), map(pred.__getitem__, unit.pred_ids)
        )
        for name in unit_subsets(unit, members):
            counts = table[name]
            counts[OUTCOME_KEY[unit.outcome]] += 1
            counts["actionable_errors"] += unit.actionable_errors
    return table


def unit_subsets(unit: Unit, findings: Iterable[Finding]) -> tuple[str, ...]:
    """The SUBSETS a unit counts in, given its findings (both sides).

    A generic unit is in none. Any other is normal or abnormal (abnormal when any of
    its findings is: the two partition the units), and comparison or measurement as
    well when any of its findings has one.
    """
    if unit.outcome is None:
        return ()
    abnormal = compared = measured = False
    for finding in findings:
        abnormal = abnormal or finding.clinical_status == "abnormal"
        compared = compared or finding.comparison is not None
        measured = measured or bool(finding.measurements)
    return _MEMBERSHIP[abnormal, compared, measured]


_MEMBERSHIP = {  # (abnormal, compared, measured) -> subsets, in SUBSETS order
    (abnormal, compared, measured): (
        ("abnormal" if abnormal else "normal",)
        + ("comparison",) * compared
        + ("measurement",) * measured
    )
    for abnormal, compared, measured in itertools.product((False, True), repeat=3)
}
