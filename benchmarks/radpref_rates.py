"""Error rates radiologists annotated in RadPref: what the realistic benchmark profile uses.

    python benchmarks/radpref_rates.py [path/to/radpref]

For each annotator and over all annotated candidate reports: the share of reference
findings the candidate missed, the share of candidate findings that are false, and the
share of the remaining (matched) candidate findings with an attribute error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "radpref"


def rates(root: Path, user: int, cases: dict) -> tuple[float, float, float]:
    annotations = json.loads((root / f"user_{user}.json").read_text(encoding="utf-8"))["annotations"]
    missed = false = attribute = reference = candidate = 0
    for case_id, by_candidate in annotations.items():
        case = cases[case_id]
        for name in ("C1", "C2"):
            if name not in by_candidate:
                continue
            marked = by_candidate[name]
            errors = list(marked.get("finding_errors", {}).values())
            missed += len(marked.get("missing_findings", {}))
            false += sum(e.get("error_type") == "false" for e in errors)
            attribute += sum(e.get("error_type") == "attribute" for e in errors)
            reference += len(case["ground_truth_findings"])
            candidate += len(case[f"{name}_findings"])
    return missed / reference, false / candidate, attribute / (candidate - false)


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    cases = {c["id"]: c for c in json.loads((root / "preference_data.json").read_text(encoding="utf-8"))}
    table = [rates(root, user, cases) for user in (1, 2, 3)]
    print("annotator  missed  false  attribute-error")
    for user, (m, f, a) in enumerate(table, 1):
        print(f"user_{user}     {m:6.2f} {f:6.2f} {a:8.2f}")
    mean = [sum(col) / len(col) for col in zip(*table)]
    print(f"mean       {mean[0]:6.2f} {mean[1]:6.2f} {mean[2]:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
