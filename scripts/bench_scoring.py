"""Recompute throughput on synthetic records of realistic size (8-15 findings a side).

    python scripts/bench_scoring.py [--pairs 10000] [--seed 0] [--repeats 3]
                                    [--profile realistic|stress|both]

Writes N synthetic records to a temp file, as `radmatch evaluate` writes them (stages and
scores), then times the same path as `radmatch recompute`: read, parse, score, write,
fold into the corpus summary, on one core, in CPU time. Reports pairs/s for the whole path
(median of the runs), its time as a multiple of a stdlib JSON round trip of the same
lines measured beside it (steady where the machine's speed drifts), and the share of each
phase. Goal: >= 2,000 pairs/s on the realistic profile.

Two workloads, both 8-15 findings a side, both with sizes on ~40 % of findings:

* realistic: the candidate is derived from the reference at the error rates radiologists
  annotated in RadPref (`scripts/radpref_rates.py`): 58 % of reference findings missed,
  47 % of candidate findings false, an attribute error on 17 % of matched findings.
* stress: every attribute of both sides drawn independently and most findings matched,
  so nearly every matched unit has several errors (about 12 actionable errors a pair).
  A worst case for scoring, not a report any system writes; reported for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

from radmatch.cli import WRITE_BUFFER
from radmatch.corpus import CorpusSummary
from radmatch.recompute import recompute_lines, score_record
from radmatch.records import Record, Stages, parse_record
from radmatch.schemas import Finding, GradingStage, MatchingAnswer, MatchRow, Measurement

TIERS = ["critical", "urgent", "notable", "routine"]
COMPARISONS = [None, None, None, "stable", "improving", "worsening", "new", "resolved"]
SENTENCE = "Moderate right lower lobe opacity measuring 2.3 cm, likely atelectasis."

# RadPref, pooled over its three radiologists (`python scripts/radpref_rates.py`)
MISSED, FALSE, ATTRIBUTE_ERROR = 0.58, 0.47, 0.17

QUALIFIERS = ["Small", "Moderate", "Large", "Mild", "Patchy", "Subtle", "Stable", "New"]
PLACES = ["right lower lobe", "left lower lobe", "right upper lobe", "left upper lobe",
          "lingular", "right hilar", "left basilar", "mediastinal", "right apical"]
ENTITIES = ["opacity", "nodule", "pleural effusion", "atelectasis", "consolidation",
            "lymph node", "mass", "granuloma", "scarring", "bronchiectasis"]


def _sizes(rnd: random.Random) -> list[Measurement]:
    return [
        Measurement(value=round(rnd.uniform(2, 40), 1), unit=rnd.choice(["mm", "cm"]), category="size")
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
        [{"dimension": "severity", "severity": rnd.choice(["major", "minor"]), "reasoning": "differs"}]
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
    return Finding(id=fid, text=text, **_attributes(rnd), measurements=measurements, evidence=[text[:-1]])


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
    rows = [MatchRow(pred_id=p, gt_id=g, reasoning="same entity", match_scope="direct") for p, g in pairs]
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
            grading=GradingStage(pairs=graded, errors_per_match=errors),
        ),
    )


PROFILES = {"realistic": realistic_record, "stress": stress_record}


def measure(profile: str, pairs: int, seed: int, repeats: int = 3) -> dict:
    """Write `pairs` scored records of one profile, then time recompute over them.

    The whole path runs `repeats` times, each time beside a plain stdlib JSON round trip
    of the same lines (read, `json.loads`, `json.dumps`, write): on a shared machine
    whose speed drifts, the ratio of the two, taken pair by pair, holds where the
    absolute rate moves.
    """
    make = PROFILES[profile]
    rnd = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.jsonl")
        out_path = os.path.join(tmp, "out.jsonl")
        actionable = 0
        with open(path, "w", encoding="utf-8") as fh:
            for i in range(pairs):  # as `radmatch evaluate` writes them: with scores
                record = score_record(make(rnd, i))
                actionable += record.scores.actionable_errors
                fh.write(record.to_json() + "\n")
        size_mb = os.path.getsize(path) / 1e6

        runs = [
            (_recompute(path, out_path), _json_round_trip(path, out_path)) for _ in range(repeats)
        ]
        phases = _phases(path)
    return {"profile": profile, "pairs": pairs, "size_mb": size_mb, "runs": runs,
            "actionable_per_pair": actionable / pairs, "phases": phases}


def _recompute(path: str, out_path: str) -> float:
    """CPU seconds of the whole path, exactly as `radmatch recompute` runs it."""
    summary = CorpusSummary()
    start = time.process_time()
    with open(path, encoding="utf-8") as src, open(
        out_path, "w", encoding="utf-8", buffering=WRITE_BUFFER
    ) as dst:
        bad = recompute_lines(src, dst.write, summary)
    summary.to_dict()  # the corpus view it prints at the end
    took = time.process_time() - start
    assert not bad, bad[:1]
    return took


def _json_round_trip(path: str, out_path: str) -> float:
    """CPU seconds to read, decode, encode and write the same lines with the stdlib alone."""
    start = time.process_time()
    with open(path, encoding="utf-8") as src, open(
        out_path, "w", encoding="utf-8", buffering=WRITE_BUFFER
    ) as dst:
        for line in src:
            dst.write(json.dumps(json.loads(line)) + "\n")
    return time.process_time() - start


def _phases(path: str) -> dict[str, float]:
    """The same stream again, phase by phase (the clock calls add a little)."""
    phases = dict.fromkeys(("parse", "score", "serialise", "summary"), 0.0)
    summary = CorpusSummary()
    clock = time.process_time
    with open(path, encoding="utf-8") as src:
        for line in src:
            t0 = clock()
            record = parse_record(line, ignore_scores=True)  # as recompute reads it
            t1 = clock()
            record = score_record(record)
            t2 = clock()
            record.to_json()
            t3 = clock()
            summary.add(record)
            t4 = clock()
            for name, took in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                phases[name] += took
    return phases


def rate(result: dict) -> float:
    """Pairs per second of the median run."""
    return result["pairs"] / statistics.median(took for took, _ in result["runs"])


def report(result: dict) -> str:
    n, phases, runs = result["pairs"], result["phases"], result["runs"]
    rates = sorted(n / took for took, _ in runs)
    ratios = [took / baseline for took, baseline in runs]
    baseline = statistics.median(b for _, b in runs)
    lines = [
        f"[{result['profile']}] {n} records ({result['size_mb']:.1f} MB JSONL, "
        f"{result['actionable_per_pair']:.1f} actionable errors a pair), one core, CPU time",
        f"  recompute (read, parse, score, write, summary): {rate(result):,.0f} pairs/s, "
        f"median of {len(runs)} runs ({rates[0]:,.0f}-{rates[-1]:,.0f})",
        f"  stdlib JSON round trip of the same lines: {n / baseline:,.0f} lines/s; recompute "
        f"takes {statistics.median(ratios):.2f}x its time ({min(ratios):.2f}-{max(ratios):.2f})",
    ]
    for name, took in phases.items():
        lines.append(f"    {name:<10} {1e6 * took / n:6.0f} us/pair  "
                     f"({100 * took / sum(phases.values()):.0f} %)")
    lines.append(f"  measured/goal (2,000 pairs/s) = {rate(result) / 2000:.2f}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", choices=[*PROFILES, "both"], default="both")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the whole path (median)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    profiles = list(PROFILES) if args.profile == "both" else [args.profile]
    results = [measure(p, args.pairs, args.seed, args.repeats) for p in profiles]
    for result in results:
        print(report(result))
    realistic = next((r for r in results if r["profile"] == "realistic"), None)
    if realistic:
        met = rate(realistic) >= 2000
        print(f"goal (realistic profile, median run) 2,000 pairs/s: {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
