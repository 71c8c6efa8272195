"""Synthetic records of realistic size (8-15 findings a side), as `radmatch-audit evaluate` writes them.

Two profiles, both with sizes on ~40 % of findings:

* realistic: the candidate is derived from the reference at the error rates radiologists
  annotated in RadPref (`benchmarks/radpref_rates.py`): 58 % of reference findings missed,
  47 % of candidate findings false, an attribute error on 17 % of matched findings.
* stress: every attribute of both sides drawn independently and most findings matched,
  so nearly every matched unit has several errors. A worst case for scoring, not a
  report any system writes.

Each generator takes a `random.Random` and an index and returns an unscored `Record`
with its three stages; the scoring benchmark and the tests share them.
"""

from __future__ import annotations

import random
from typing import get_args

from radmatch_audit.core.records import Record, Stages
from radmatch_audit.core.schemas import (
    Comparison,
    Finding,
    GradingStage,
    MatchingAnswer,
    MatchRow,
    Measurement,
)
from radmatch_audit.scoring.results import SIGNIFICANCE_TIERS

TIERS = list(SIGNIFICANCE_TIERS)
COMPARISONS = [None, None, None, *get_args(Comparison)]  # no comparison on 3 in 8 findings
SENTENCE = "Moderate right lower lobe opacity measuring 2.3 cm, likely atelectasis."

# RadPref, pooled over its three radiologists (`python benchmarks/radpref_rates.py`)
MISSED, FALSE, ATTRIBUTE_ERROR = 0.58, 0.47, 0.17

QUALIFIERS = ["Small", "Moderate", "Large", "Mild", "Patchy", "Subtle", "Stable", "New"]
PLACES = ["right lower lobe", "left lower lobe", "right upper lobe", "left upper lobe",
          "lingular", "right hilar", "left basilar", "mediastinal", "right apical"]
ENTITIES = ["opacity", "nodule", "pleural effusion", "atelectasis", "consolidation",
            "lymph node", "mass", "granuloma", "scarring", "bronchiectasis"]


def _sizes(rnd: random.Random) -> list[Measurement]:
    return [
        Measurement(
            value=round(rnd.uniform(2, 40), 1), unit=rnd.choice(["mm", "cm"]), category="size"
        )
        for _ in range(rnd.choice([0, 0, 0, 1, 2]))
    ]


def _attributes(rnd: random.Random) -> dict:
    return {
        "clinical_status": rnd.choice(["normal", "abnormal"]),
        "clinical_significance": rnd.choice(TIERS),
        "comparison": rnd.choice(COMPARISONS),
    }


# --------------------------------------------------------------------------- stress


def _stress_finding(rnd: random.Random, fid: str) -> Finding:
    measurements = _sizes(rnd)
    return Finding(
        id=fid,
        text=SENTENCE,
        **_attributes(rnd),
        measurements=measurements,
        evidence=[SENTENCE[: rnd.randint(20, 60)]],
    )


def stress_record(rnd: random.Random, index: int) -> Record:
    n_gt, n_pred = rnd.randint(8, 15), rnd.randint(8, 15)
    gt = [_stress_finding(rnd, f"gt_{i}") for i in range(1, n_gt + 1)]
    pred = [_stress_finding(rnd, f"p_{i}") for i in range(1, n_pred + 1)]
    gt_ids, pred_ids = [x.id for x in gt], [x.id for x in pred]
    rnd.shuffle(gt_ids)
    rnd.shuffle(pred_ids)
    pairs = list(zip(pred_ids, gt_ids))[: min(n_gt, n_pred) - 2]  # most findings matched 1:1
    errors = [
        [{"dimension": "severity", "severity": rnd.choice(["major", "minor"]),
          "reasoning": "differs"}]
        if rnd.random() < 0.3
        else []
        for _ in range(len(pairs) + 1)
    ]
    return _record(index, gt, pred, pairs, (pred_ids[0], gt_ids[-1]), errors)


# --------------------------------------------------------------------------- realistic


def _realistic_finding(rnd: random.Random, fid: str) -> Finding:
    measurements = _sizes(rnd)
    text = f"{rnd.choice(QUALIFIERS)} {rnd.choice(PLACES)} {rnd.choice(ENTITIES)}"
    if measurements:
        text += " measuring " + " by ".join(f"{m.value:g} {m.unit}" for m in measurements)
    text += "."
    return Finding(
        id=fid, text=text, **_attributes(rnd), measurements=measurements, evidence=[text[:-1]]
    )


def _reported(rnd: random.Random, gt: Finding, fid: str) -> tuple[Finding, list[dict]]:
    """The candidate's version of a reference finding, with an error at the annotated rate."""
    finding = gt.model_copy(update={"id": fid}, deep=True)
    if rnd.random() >= ATTRIBUTE_ERROR:
        return finding, []
    kind = rnd.choice(["status", "comparison", "measurement", "judge"])
    if kind == "status":
        finding.clinical_status = "normal" if gt.clinical_status == "abnormal" else "abnormal"
    elif kind == "comparison":
        finding.comparison = rnd.choice([c for c in COMPARISONS if c != gt.comparison])
    elif kind == "measurement" and finding.measurements:
        finding.measurements[0].value = round(finding.measurements[0].value * 1.5, 1)
    else:
        dimension = rnd.choice(["location", "severity", "certainty"])
        return finding, [{"dimension": dimension, "severity": rnd.choice(["major", "minor"]),
                          "reasoning": f"{dimension} differs from the reference"}]
    return finding, []


def realistic_record(rnd: random.Random, index: int) -> Record:
    n_gt = rnd.randint(8, 15)
    gt = [_realistic_finding(rnd, f"gt_{i}") for i in range(1, n_gt + 1)]
    reported = [g for g in gt if rnd.random() >= MISSED]
    n_pred = min(15, max(8, round(len(reported) / (1 - FALSE))))
    sources: list = reported + [None] * (n_pred - len(reported))
    rnd.shuffle(sources)
    pred, pairs, graded_errors = [], [], {}
    for i, source in enumerate(sources, 1):
        if source is None:
            pred.append(_realistic_finding(rnd, f"p_{i}"))
            continue
        finding, errors = _reported(rnd, source, f"p_{i}")
        pred.append(finding)
        pairs.append((finding.id, source.id))
        graded_errors[(finding.id, source.id)] = errors
    missed = [g.id for g in gt if g not in reported]
    aggregate = (pairs[0][0], missed[0]) if pairs and missed and rnd.random() < 0.3 else None
    errors = [graded_errors[p] for p in pairs] + ([[]] if aggregate else [])
    return _record(index, gt, pred, pairs, aggregate, errors)


# --------------------------------------------------------------------------- shared


def _record(index, gt, pred, pairs, aggregate, errors) -> Record:
    rows = [
        MatchRow(pred_id=p, gt_id=g, reasoning="same entity", match_scope="direct")
        for p, g in pairs
    ]
    if aggregate:
        rows.append(MatchRow(pred_id=aggregate[0], gt_id=aggregate[1], reasoning="umbrella",
                             match_scope="aggregate"))
    matched_p = {r.pred_id for r in rows}
    matched_g = {r.gt_id for r in rows}
    matching = MatchingAnswer(
        matches=rows,
        unmatched_pred=[f.id for f in pred if f.id not in matched_p],
        unmatched_gt=[f.id for f in gt if f.id not in matched_g],
    )
    graded = [(r.pred_id, r.gt_id) for r in rows]
    return Record(
        pair_id=f"bench-{index}",
        reference=" ".join(f.text for f in gt),
        candidate=" ".join(f.text for f in pred),
        stages=Stages(
            reference_findings=gt,
            candidate_findings=pred,
            matching=matching,
            grading=GradingStage(pairs=graded, grades=[
                {"pred_id": p, "gt_id": g, "errors": e} for (p, g), e in zip(graded, errors)
            ]),
        ),
    )


PROFILES = {"realistic": realistic_record, "stress": stress_record}
