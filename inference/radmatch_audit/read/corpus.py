"""Corpus scores over records (docs/scoring.md section 6).

Counts are summed over scored records; safety and attribution numerators and
denominators are pooled (micro average) with 95 % Wilson intervals; the mean
actionable errors per pair has a 95 % bootstrap interval over studies (seeded: the
same records give the same interval; a pair without a study id is its own study), and
so has the mean significant errors per pair, over the scored pairs whose error
adjudication stands (its own n; the others are counted by adjudication state).
Failed records are counted apart and never scored. When a pair_id occurs more than
once the last record counts. Memory holds one small tuple of integers per pair (and
its study id), never the records.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Optional, get_args

from radmatch_audit.core.records import Record
from radmatch_audit.read.resampling import mean_interval, wilson_interval
from radmatch_audit.core.scores import AdjudicationState
from radmatch_audit.scoring.results import (
    DIMENSIONS,
    OUTCOME_COUNT_KEYS,
    OUTCOME_KEYS,
    SAFETY_TIERS,
    SEVERITY_LEVELS,
    SUBSETS,
    ratio,
)

SUBSET_KEYS = (*OUTCOME_KEYS, "actionable_errors")
ADJUDICATION_STATES: tuple[str, ...] = get_args(AdjudicationState)

# One flat integer vector per pair; FIELDS names its slots.
FIELDS: tuple[tuple[str, ...], ...] = (
    ("scored",),
    ("failed",),
    ("actionable_errors",),
    *(("outcomes", k) for k in OUTCOME_COUNT_KEYS),
    *(
        ("safety", tier, k)
        for tier in SAFETY_TIERS
        for k in ("precision_num", "precision_den", "recall_num", "recall_den")
    ),
    *(("attribution", side, k) for side in ("reference", "candidate") for k in ("findings", "attributed")),
    *(("attributes", dim, level) for dim in DIMENSIONS for level in SEVERITY_LEVELS),
    *(("subsets", name, k) for name in SUBSETS for k in SUBSET_KEYS),
)
SLOT = {path: i for i, path in enumerate(FIELDS)}


_RATIO_KEYS = ("precision_num", "precision_den", "recall_num", "recall_den")
_FAILED = tuple(int(path == ("failed",)) for path in FIELDS)


def tally(record: Record) -> tuple[int, ...]:
    """The record's contribution to the corpus counts, slot by slot as FIELDS names them."""
    s = record.scores
    if record.error is not None or s is None:
        return _FAILED
    outcomes, safety, attribution = s.outcomes, s.safety, s.attribution
    attributes, subsets = s.attributes, s.subsets
    return (
        1,  # scored
        0,  # failed
        s.actionable_errors,
        *[outcomes.get(key, 0) for key in OUTCOME_COUNT_KEYS],
        *[getattr(safety[tier], key) for tier in SAFETY_TIERS for key in _RATIO_KEYS],
        attribution.reference.findings,
        attribution.reference.attributed,
        attribution.candidate.findings,
        attribution.candidate.attributed,
        *[attributes.get(dim, {}).get(level, 0) for dim in DIMENSIONS for level in SEVERITY_LEVELS],
        *[subsets.get(name, {}).get(key, 0) for name in SUBSETS for key in SUBSET_KEYS],
    )


class CorpusSummary:
    """Folds records one at a time; `to_dict()` gives the corpus view."""

    def __init__(self, *, streaming: bool = False) -> None:
        """`streaming=True` folds each record into running sums and keeps only pair ids
        (with each pair's study and count, for the mean's interval), for a run whose
        pair_ids are known to be unique (memory stays small); by default
        every pair's contribution is kept, so that a repeated pair_id replaces its own.
        """
        self._by_pair: dict[str, tuple[int, ...]] = {}
        self._folded = [0] * len(FIELDS) if streaming else None
        self._seen: set[str] = set()
        self._failed: dict[str, str] = {}
        # pair_id -> (study, actionable errors or None when failed, significant errors or
        # None unless the adjudication stands, adjudication state): the means' intervals
        self._errors: dict[str, tuple[Hashable, Optional[int], Optional[int], str]] = {}
        self.warnings: list[str] = []
        self._duplicates = 0
        self._identical: dict[str, bool] = {}  # pair_id -> identical counts across samples

    def add(self, record: Record) -> None:
        contribution = tally(record)
        pair_id = record.pair_id
        if pair_id in self._seen:
            self._duplicates += 1
            self._failed.pop(pair_id, None)
        self._seen.add(pair_id)
        if self._folded is not None:
            self._folded = [a + b for a, b in zip(self._folded, contribution)]
        else:
            self._by_pair[pair_id] = contribution
        failed = contribution[SLOT[("failed",)]]
        if failed:
            self._failed[pair_id] = record.error or "not scored"
        study = ("study", record.study_id) if record.study_id else ("pair", pair_id)
        scores = None if failed else record.scores
        self._errors[pair_id] = (
            study,
            None if scores is None else scores.actionable_errors,
            None if scores is None or scores.adjudication != "current" else scores.significant_errors,
            "" if scores is None else scores.adjudication,
        )
        if record.stability is not None:  # --samples K: did every sample count the same?
            self._identical[pair_id] = bool(record.stability.identical)
        else:
            self._identical.pop(pair_id, None)

    def extend(self, records: Iterable[Record]) -> "CorpusSummary":
        for record in records:
            self.add(record)
        return self

    def totals(self) -> dict[tuple[str, ...], int]:
        """Each slot of FIELDS summed over the pairs (the last record of each pair)."""
        if self._folded is not None:
            return dict(zip(FIELDS, self._folded))
        sums = [sum(column) for column in zip(*self._by_pair.values())] or [0] * len(FIELDS)
        return dict(zip(FIELDS, sums))

    def mean_interval(self, count: str = "actionable") -> tuple[Optional[list[float]], int]:
        """95 % interval of the mean actionable (or, `count="significant"`, significant)
        errors per pair that has that count, resampling studies (radmatch_audit.read.resampling,
        seeded), and the number of studies; (None, n) when no pair has the count."""
        slot = 1 if count == "actionable" else 2
        # studies in a fixed (sorted) order: records are written as pairs finish, and the
        # interval must not depend on the order of the file's lines
        scored = sorted((entry[0], entry[slot]) for entry in self._errors.values()
                        if entry[slot] is not None)
        studies = len({study for study, _ in scored})
        if not scored:
            return None, studies
        low, high = mean_interval([e for _, e in scored], [s for s, _ in scored])
        return [low, high], studies

    def significant(self) -> dict[str, Any]:
        """The significant-error keys of `to_dict()` (docs/scoring.md section 6)."""
        counts = [entry[2] for entry in self._errors.values() if entry[2] is not None]
        states = dict.fromkeys(ADJUDICATION_STATES, 0)
        for entry in self._errors.values():
            if entry[3]:
                states[entry[3]] += 1
        interval, studies = self.mean_interval("significant")
        return {
            "mean_significant_errors": ratio(sum(counts), len(counts)),
            "mean_significant_errors_ci": interval,
            "n_adjudicated": len(counts),
            "n_adjudicated_studies": studies,
            "significant_errors": sum(counts),
            "adjudication": states,
        }

    def to_dict(self) -> dict[str, Any]:
        totals = self.totals()

        def get(*path: str) -> int:
            return totals[path]

        n_scored = get("scored")
        warnings = list(self.warnings)
        if self._duplicates:
            warnings.append(
                f"{self._duplicates} record(s) repeat an earlier pair_id; the last record of "
                "each pair counts"
            )
        safety = {}
        for tier in SAFETY_TIERS:
            entry: dict[str, Any] = {}
            for name in ("precision", "recall"):
                num, den = get("safety", tier, f"{name}_num"), get("safety", tier, f"{name}_den")
                entry[name] = ratio(num, den)
                entry[f"{name}_ci"] = wilson_interval(num, den)
                entry[f"{name}_num"] = num
                entry[f"{name}_den"] = den
            safety[tier] = entry
        attribution = {}
        for side in ("reference", "candidate"):
            findings = get("attribution", side, "findings")
            attributed = get("attribution", side, "attributed")
            attribution[side] = {
                "findings": findings,
                "attributed": attributed,
                "rate": ratio(attributed, findings),
                "rate_ci": wilson_interval(attributed, findings),
            }
        actionable = get("actionable_errors")
        mean_ci, n_studies = self.mean_interval()
        return {
            "n_pairs": len(self._seen),
            "n_scored": n_scored,
            "n_failed": get("failed"),
            "mean_actionable_errors": ratio(actionable, n_scored),
            "mean_actionable_errors_ci": mean_ci,
            "n_studies": n_studies,
            "actionable_errors": actionable,
            **self.significant(),
            "outcomes": {k: get("outcomes", k) for k in OUTCOME_COUNT_KEYS},
            "safety": safety,
            "attribution": attribution,
            "attributes": {
                dim: {level: get("attributes", dim, level) for level in SEVERITY_LEVELS}
                for dim in DIMENSIONS
            },
            "subsets": {
                name: {k: get("subsets", name, k) for k in SUBSET_KEYS} for name in SUBSETS
            },
            "failed_pairs": dict(sorted(self._failed.items())),
            "warnings": warnings,
            **({"stability": self.stability()} if self._identical else {}),
        }

    def stability(self) -> dict[str, Any]:
        """Over the sampled pairs: how many counted the same actionable errors in every sample."""
        n, same = len(self._identical), sum(self._identical.values())
        return {"pairs": n, "identical": same, "share": ratio(same, n),
                "share_ci": wilson_interval(same, n)}


def summarize(records: Iterable[Record]) -> CorpusSummary:
    return CorpusSummary().extend(records)


def _pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _ci(interval: Optional[list[float]]) -> str:
    return "" if interval is None else f"[{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]"


def _mean_ci(summary: dict[str, Any], count: str = "actionable") -> str:
    interval = summary.get(f"mean_{count}_errors_ci")
    if interval is None:
        return ""
    studies = summary.get("n_studies" if count == "actionable" else "n_adjudicated_studies")
    over = f", bootstrap over {studies} {'study' if studies == 1 else 'studies'}" if studies else ""
    return f"   95% CI [{interval[0]:.3f}, {interval[1]:.3f}]{over}"


def _mean_lines(summary: dict[str, Any]) -> list[str]:
    """Both means per pair: the significant errors first where the adjudication ran."""
    mean = summary["mean_actionable_errors"]
    actionable = ("mean actionable errors per pair: " + ("n/a" if mean is None else f"{mean:.3f}")
                  + _mean_ci(summary) + "   (the paper's RadMatch count)")
    if "mean_significant_errors" not in summary:  # a summary written before adjudication
        return [actionable]
    states = summary["adjudication"]
    left_out = ", ".join(f"{n} {state}" for state, n in states.items() if n and state != "current")
    n = summary["n_adjudicated"]
    if not n:
        return [actionable, "mean significant errors per pair: n/a (no adjudication stands"
                + (f": {left_out})" if left_out else ")")]
    significant = (f"mean significant errors per pair: {summary['mean_significant_errors']:.3f}"
                   + _mean_ci(summary, "significant")
                   + f"   n {n} adjudicated" + (f" (not counted: {left_out})" if left_out else ""))
    return [significant, actionable]


SHOWN_FAILURES = 10  # failed pairs listed by format_summary; the rest are counted
GENERIC_NOTE = (
    '  (GENERIC: a normal finding matched only by a global negative, e.g. "No acute '
    'abnormality", to a specific rule-out: not graded, no error, no safety credit; '
    "docs/scoring.md 2-3)"
)
SAME_TIER_ROWS_NOTE = (
    "  (triage and actionable are the same: no finding of either report is notable, the "
    "one tier actionable adds to triage)"
)
AGREEMENT = 'README.md, "Agreement with radiologists"'
EXPLAIN_POINTER = (
    "what each line means: radmatch-audit summary --explain; what radiologists and a "
    f"capable judge reach: {AGREEMENT}"
)
EXPLANATION = f"""What each line means (the rules: docs/scoring.md; reading one: its section 6):
  pairs, scored, failed: pairs read; pairs with scores; pairs whose judge failed, which
    have no scores (never 0 errors) and are listed with their reason
  judge: the backend/model that answered; the embedded SmolLM2 judge's counts are not clinical
  mean actionable errors per pair: the RadMatch score, units that are INC, MIS or SPU at
    tier critical, urgent or notable, per scored pair; lower is better, 0 is a report with
    no clinically actionable error; its 95% CI resamples whole studies
  outcomes: the units of every tier (a unit is a group of matched findings, or one
    finding left unmatched), counted once each:
    COR: matched, no error
    PAR: matched, minor errors only (e.g. a vaguer location or severity)
    INC: matched, at least one major error (e.g. present against absent, new against stable)
    MIS: a reference finding the candidate leaves out
    SPU: a candidate finding the reference does not support; an unaddressed negative
      ("No pneumothorax." where the reference is silent) is SPU but not an actionable error
    GENERIC: a normal finding covered only by a global negative: no error, no credit
  safety: per tier set, the share of findings whose unit is COR or PAR, pooled over pairs,
    with its 95% Wilson CI and count; a finding counts at its own tier
    precision: over the candidate's findings (low: it invents or gets findings wrong)
    recall: over the reference's findings (low: it misses or gets findings wrong)
    triage: critical and urgent findings
    actionable: critical, urgent and notable findings; the same row as triage when no
      finding of either report is notable
    all: every tier, routine included: completeness (recall) and conciseness (precision)
  subset: outcome counts and actionable errors of the units in each subset: normal (all
    findings normal) and abnormal (at least one abnormal) split the units; comparison (a
    finding states a change against a prior study), measurement (a finding has a number)
  evidence attributed: per side, findings whose every evidence quote is found verbatim in
    their report; fewer means the judge paraphrased or invented its quotes
  stability (with --samples K): pairs whose count was the same in every sample
  failed pairs: each failed pair's id and reason (the first 10)
  warning: what to keep in mind: a repeated pair_id (its last record counts), or counts of
    the embedded judge, which are not clinical
What values mean: what radiologists reach with each other and a capable judge reaches
  against them, as Kendall tau-b over RadPref's 200 pairs: {AGREEMENT}"""


def format_summary(summary: dict[str, Any]) -> str:
    """A plain-text table of the corpus view, for the terminal (EXPLANATION says what
    each line means).

    Beyond `to_dict()`, an optional "judges" key (a list of "backend/model") is shown.
    """
    judges = summary.get("judges")
    lines = [
        f"pairs {summary['n_pairs']}   scored {summary['n_scored']}   failed {summary['n_failed']}",
        *([f"judge{'s' if len(judges) > 1 else ''}: {', '.join(judges)}"] if judges else []),
        *_mean_lines(summary),
        "outcomes: "
        + "  ".join(f"{k.upper()} {v}" for k, v in summary["outcomes"].items()),
        *([GENERIC_NOTE] if "generic" in summary["outcomes"] else []),
        "",
        f"{'safety':<11}{'precision':>10} {'95% CI':<15}{'n':>11}"
        f"{'recall':>10} {'95% CI':<15}{'n':>11}",
    ]
    for tier, s in summary["safety"].items():
        lines.append(
            f"{tier:<11}{_pct(s['precision']):>10} {_ci(s['precision_ci']):<15}"
            f"{s['precision_num']:>5}/{s['precision_den']:<5}"
            f"{_pct(s['recall']):>10} {_ci(s['recall_ci']):<15}"
            f"{s['recall_num']:>5}/{s['recall_den']:<5}"
        )
    if _same_tier_rows(summary["safety"]):
        lines.append(SAME_TIER_ROWS_NOTE)
    lines.append("")
    lines.append(f"{'subset':<13}" + "".join(f"{k:>6}" for k in OUTCOME_KEYS) + "  actionable")
    for name, row in summary["subsets"].items():
        lines.append(
            f"{name:<13}" + "".join(f"{row[k]:>6}" for k in OUTCOME_KEYS)
            + f"  {row['actionable_errors']:>10}"
        )
    att = summary["attribution"]
    lines.append("")
    lines.append(
        "evidence attributed: reference "
        f"{att['reference']['attributed']}/{att['reference']['findings']}, candidate "
        f"{att['candidate']['attributed']}/{att['candidate']['findings']}"
    )
    stability = summary.get("stability")
    if stability:
        lines.append("")
        lines.append(
            f"stability: {stability['identical']}/{stability['pairs']} sampled pairs "
            f"({_pct(stability['share'])}, 95% CI {_ci(stability['share_ci'])}) counted the "
            "same actionable errors in every sample"
        )
    failed = summary.get("failed_pairs") or {}
    if failed:
        lines.append("")
        lines.append(f"failed pairs ({len(failed)}, not scored):")
        for pair_id, reason in list(failed.items())[:SHOWN_FAILURES]:
            lines.append(f"  {pair_id}: {reason}")
        if len(failed) > SHOWN_FAILURES:
            lines.append(f"  (+{len(failed) - SHOWN_FAILURES} more)")
    for warning in summary["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


def _same_tier_rows(safety: dict[str, Any]) -> bool:
    """True when the triage and actionable rows count the same findings: actionable adds
    the notable tier, so the two are equal exactly when no finding on either side is notable."""
    triage, actionable = safety.get("triage"), safety.get("actionable")
    keys = ("precision_den", "recall_den")
    return bool(triage and actionable) and all(triage[k] == actionable[k] for k in keys) and any(
        triage[k] for k in keys
    )
