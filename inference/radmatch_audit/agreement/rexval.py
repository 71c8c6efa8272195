"""ReXVal (PhysioNet, credentialed): 50 MIMIC-CXR studies, four candidates each, error
counts from six radiologists. Nothing is downloaded: pass the folder you downloaded.

Files, as distributed (version 1.0.0), in one folder:
- `50_samples_gt_and_candidates.csv`: `study_id`, `gt_report`, then one column per
  candidate (`radgraph`, `bertscore`, `s_emb`, `bleu`: the metric that retrieved it);
- `6_valid_raters_per_rater_error_categories.csv`: `study_number` (the study's row in
  the first file, from 0), `candidate_type` (one of the candidate columns),
  `rater_index`, `error_category` (1-6), `clinically_significant` (true/false),
  `num_errors`.

Per pair and radiologist, counts are summed over rows; the endpoint is their mean over
every radiologist of the file (a radiologist with no row for a pair counts 0).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

from radmatch_audit.agreement.annotations import (
    AnnotationError, AnnotationSet, Case, Endpoint, require_columns,
)

STUDIES_FILE = "50_samples_gt_and_candidates.csv"
RATERS_FILE = "6_valid_raters_per_rater_error_categories.csv"
CANDIDATES = ["radgraph", "bertscore", "s_emb", "bleu"]
STUDY_COLUMNS = ["study_id", "gt_report", *CANDIDATES]
RATER_COLUMNS = ["study_number", "candidate_type", "rater_index", "error_category",
                 "clinically_significant", "num_errors"]
CATEGORIES = {
    1: "false prediction of finding",
    2: "omission of finding",
    3: "incorrect location/position of finding",
    4: "incorrect severity of finding",
    5: "comparison not in the reference",
    6: "omitted comparison (change from a prior study)",
}
ENDPOINTS = [
    Endpoint("total", "total errors"),
    Endpoint("significant", "clinically significant errors"),
    Endpoint("insignificant", "clinically insignificant errors"),
] + [Endpoint(f"category_{k}", f"significant: {name}") for k, name in CATEGORIES.items()]
_TRUE = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _read_csv(path: Path, expected: list[str]) -> list[dict[str, str]]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            require_columns(str(path), list(reader.fieldnames or []), expected, "ReXVal 1.0.0")
            return list(reader)
    except FileNotFoundError:
        raise AnnotationError(
            f"{path}: not found; a ReXVal folder holds {STUDIES_FILE} and {RATERS_FILE} "
            "as downloaded from PhysioNet (credentialed access)"
        ) from None


def pair_id(study_id: str, candidate: str) -> str:
    return f"{study_id}/{candidate}"


def load_rexval(folder: str | Path) -> AnnotationSet:
    root = Path(folder)
    studies = _read_csv(root / STUDIES_FILE, STUDY_COLUMNS)
    rows = _read_csv(root / RATERS_FILE, RATER_COLUMNS)
    sums: dict[tuple[int, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    raters: set[str] = set()
    for line, row in enumerate(rows, 2):
        try:
            number = int(row["study_number"])
            category = int(float(row["error_category"]))
            count = float(row["num_errors"])
            significant = _TRUE[str(row["clinically_significant"]).strip().lower()]
        except (ValueError, KeyError):
            raise AnnotationError(f"{root / RATERS_FILE}: line {line} has a value that is not "
                                  "a number or a true/false") from None
        if not 0 <= number < len(studies):
            raise AnnotationError(f"{root / RATERS_FILE}: line {line}: study_number {number} is "
                                  f"not a row of {STUDY_COLUMNS[0]} (0 to {len(studies) - 1})")
        if row["candidate_type"] not in CANDIDATES or category not in CATEGORIES:
            raise AnnotationError(f"{root / RATERS_FILE}: line {line}: candidate_type must be one of "
                                  f"{CANDIDATES} and error_category 1-6")
        raters.add(row["rater_index"])
        counts = sums[(number, row["candidate_type"], row["rater_index"])]
        counts["total"] += count
        counts["significant" if significant else "insignificant"] += count
        if significant:
            counts[f"category_{category}"] += count
    out = AnnotationSet("rexval", list(ENDPOINTS), {}, raters=len(raters))
    for number, study in enumerate(studies):
        sid = str(study["study_id"])
        for candidate in CANDIDATES:
            pid = pair_id(sid, candidate)
            out.rows.append({"pair_id": pid, "study_id": sid, "modality": "chest_xray",
                             "reference": study["gt_report"], "candidate": study[candidate]})
            per_rater = [sums.get((number, candidate, r), {}) for r in sorted(raters)]
            if not raters:
                continue
            targets = {e.key: sum(c.get(e.key, 0.0) for c in per_rater) / len(raters) for e in ENDPOINTS}
            out.cases[pid] = Case(pid, sid, targets)
    return out
