"""Judge calls per pair on a workload of K candidates per reference, cold and on a rerun.

    python scripts/bench_judge_calls.py [--references 10] [--candidates 4]

The judge is a loopback OpenAI-compatible server (tests/openai_stub.py) that counts
the requests it receives: the figure is about the pipeline's call pattern (shared
reference extraction, the answer cache, skipped calls), not about any model. Goals:
at most 3.25 calls per pair cold with 4 candidates per reference, 0 on a rerun.
Reports carry no indication header here, so no indication call is made.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from openai_stub import StubServer  # noqa: E402

from radmatch import Evaluator, PairInput  # noqa: E402
from radmatch.judges.openai_compat import OpenAICompatibleJudge  # noqa: E402

SENTENCES = [
    "Small left pleural effusion.", "No pneumothorax.", "Heart size is normal.",
    "Mild bibasilar atelectasis.", "A 9 mm nodule in the right upper lobe.",
    "Endotracheal tube tip 4 cm above the carina.", "No focal consolidation.",
    "Moderate cardiomegaly.", "Degenerative changes of the thoracic spine.",
]


def workload(n_refs: int, n_cands: int) -> list[PairInput]:
    pairs = []
    for r in range(n_refs):
        reference = "FINDINGS: " + " ".join(SENTENCES[(r + k) % len(SENTENCES)] for k in range(5))
        reference += f" Reported for study {r}."
        for c in range(n_cands):
            # every candidate is distinct and shares findings with its reference, so each
            # pair needs its own extraction, matching and grading: the worst case
            shared = " ".join(SENTENCES[(r + c + k) % len(SENTENCES)] for k in range(3))
            candidate = f"FINDINGS: {shared} Drafted by system {c} for study {r}."
            pairs.append(PairInput(reference=reference, candidate=candidate, pair_id=f"r{r}-c{c}"))
    return pairs


def run(server: StubServer, cache_dir: Path, pairs: list[PairInput]) -> tuple[int, int]:
    judge = OpenAICompatibleJudge(base_url=server.base_url, model="stub-judge", api_key=None)
    evaluator = Evaluator(judge, cache_dir=cache_dir, concurrency=8)
    before = len(server.chat_requests())
    records = evaluator.evaluate(pairs)
    failed = sum(r.error is not None for r in records)
    return len(server.chat_requests()) - before, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--references", type=int, default=10)
    parser.add_argument("--candidates", type=int, default=4)
    args = parser.parse_args()
    pairs = workload(args.references, args.candidates)
    with tempfile.TemporaryDirectory() as tmp, StubServer() as server:
        cold, failed_cold = run(server, Path(tmp), pairs)
        rerun, failed_rerun = run(server, Path(tmp), [PairInput(**vars(p)) for p in pairs])
    n = len(pairs)
    print(f"workload: {args.references} references x {args.candidates} candidates = {n} pairs")
    print(f"cold:  {cold} judge calls, {cold / n:.2f} per pair (goal <= 3.25), {failed_cold} failed")
    print(f"rerun: {rerun} judge calls, {rerun / n:.2f} per pair (goal 0), {failed_rerun} failed")
    ok = cold / n <= 3.25 and rerun == 0 and not failed_cold and not failed_rerun
    print("goals met" if ok else "goals NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
