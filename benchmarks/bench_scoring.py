"""Recompute throughput on synthetic records of realistic size (8-15 findings a side).

    python benchmarks/bench_scoring.py [--pairs 10000] [--seed 0] [--repeats 3]
                                    [--profile realistic|stress|both]

Writes N synthetic records to a temp file, as `radmatch-audit evaluate` writes them (stages and
scores), then times the same path as `radmatch-audit recompute`: read, parse, score, write,
fold into the corpus summary, on one core, in CPU time. Reports pairs/s for the whole path
(median of the runs), its time as a multiple of a stdlib JSON round trip of the same
lines measured beside it (steady where the machine's speed drifts), and the share of each
phase. Goal: >= 2,000 pairs/s on the realistic profile.

Two workloads (`radmatch_audit.testing.synthetic`), both 8-15 findings a side:

* realistic: the candidate is derived from the reference at the error rates radiologists
  annotated in RadPref: 58 % of reference findings missed, 47 % of candidate findings
  false, an attribute error on 17 % of matched findings.
* stress: most findings matched and nearly every matched unit wrong (about 12 actionable
  errors a pair). A worst case for scoring, not a report any system writes; reported
  for comparison.
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

from radmatch_audit.cli.common import WRITE_BUFFER
from radmatch_audit.read.corpus import CorpusSummary
from radmatch_audit.read.recompute import recompute_lines, score_record
from radmatch_audit.files.record_io import parse_record
from radmatch_audit.testing.synthetic import PROFILES


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
            for i in range(pairs):  # as `radmatch-audit evaluate` writes them: with scores
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
    """CPU seconds of the whole path, exactly as `radmatch-audit recompute` runs it."""
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
