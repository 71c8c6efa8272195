"""Recompute throughput on synthetic records of realistic size (8-15 findings a side).

    python scripts/bench_scoring.py [--pairs 10000] [--seed 0]

Writes N synthetic records (stages only) to a temp file, then times the same path as
`radmatch recompute`: parse, score, serialise, fold into the corpus summary, on one
core. Reports pairs/s for the whole path and the time of each phase. Goal: >= 2,000 pairs/s.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

from radmatch.corpus import CorpusSummary
from radmatch.recompute import recompute_lines, score_record
from radmatch.records import Record, Stages, parse_record
from radmatch.schemas import Finding, GradingStage, MatchingAnswer, MatchRow, Measurement

TIERS = ["critical", "urgent", "notable", "routine"]
COMPARISONS = [None, None, None, "stable", "improving", "worsening", "new", "resolved"]
SENTENCE = "Moderate right lower lobe opacity measuring 2.3 cm, likely atelectasis."


def _finding(rnd: random.Random, fid: str) -> Finding:
    measurements = [
        Measurement(value=round(rnd.uniform(2, 40), 1), unit=rnd.choice(["mm", "cm"]), category="size")
        for _ in range(rnd.choice([0, 0, 0, 1, 2]))
    ]
    return Finding(
        id=fid,
        text=SENTENCE,
        clinical_status=rnd.choice(["normal", "abnormal"]),
        clinical_significance=rnd.choice(TIERS),
        comparison=rnd.choice(COMPARISONS),
        measurements=measurements,
        evidence=[SENTENCE[: rnd.randint(20, 60)]],
    )


def synthetic_record(rnd: random.Random, index: int) -> Record:
    n_gt, n_pred = rnd.randint(8, 15), rnd.randint(8, 15)
    gt = [_finding(rnd, f"gt_{i}") for i in range(1, n_gt + 1)]
    pred = [_finding(rnd, f"p_{i}") for i in range(1, n_pred + 1)]
    gt_ids, pred_ids = [x.id for x in gt], [x.id for x in pred]
    rnd.shuffle(gt_ids)
    rnd.shuffle(pred_ids)
    rows = []
    for k in range(min(n_gt, n_pred) - 2):  # most findings matched 1:1
        rows.append(MatchRow(pred_id=pred_ids[k], gt_id=gt_ids[k], reasoning="same entity", match_scope="direct"))
    rows.append(MatchRow(pred_id=pred_ids[0], gt_id=gt_ids[-1], reasoning="umbrella", match_scope="aggregate"))
    matched_p = {r.pred_id for r in rows}
    matched_g = {r.gt_id for r in rows}
    matching = MatchingAnswer(
        matches=rows,
        unmatched_pred=[i for i in pred_ids if i not in matched_p],
        unmatched_gt=[i for i in gt_ids if i not in matched_g],
    )
    graded = [(r.pred_id, r.gt_id) for r in rows]
    errors = [
        [{"dimension": "severity", "severity": rnd.choice(["major", "minor"]), "reasoning": "differs"}]
        if rnd.random() < 0.3
        else []
        for _ in graded
    ]
    return Record(
        pair_id=f"bench-{index}",
        reference=" ".join([SENTENCE] * n_gt),
        candidate=" ".join([SENTENCE] * n_pred),
        stages=Stages(
            reference_findings=gt,
            candidate_findings=pred,
            matching=matching,
            grading=GradingStage(pairs=graded, errors_per_match=errors),
        ),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    rnd = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.jsonl")
        with open(path, "w", encoding="utf-8") as fh:
            for i in range(args.pairs):  # as `radmatch evaluate` writes them: with scores
                fh.write(score_record(synthetic_record(rnd, i)).to_json() + "\n")
        size_mb = os.path.getsize(path) / 1e6

        # the whole path, exactly as `radmatch recompute` runs it
        summary = CorpusSummary()
        start = time.process_time()
        out_path = os.path.join(tmp, "out.jsonl")
        with open(path, encoding="utf-8") as src, open(out_path, "w", encoding="utf-8") as dst:
            bad = recompute_lines(src, dst.write, summary)
        full = time.process_time() - start
        assert not bad, bad[:1]

        # the same stream again, phase by phase
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

    n = args.pairs
    print(f"records: {n} ({size_mb:.1f} MB JSONL), one core, CPU time")
    print(f"recompute (parse + score + serialise + summary): {n / full:,.0f} pairs/s ({full:.2f} s)")
    for name, took in phases.items():
        print(f"  {name:<10} {1e6 * took / n:7.0f} us/pair  ({100 * took / sum(phases.values()):.0f} %)")
    print(f"goal 2,000 pairs/s: {'met' if n / full >= 2000 else 'NOT met'} "
          f"(measured/goal = {n / full / 2000:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
