"""RadPref (CRIMSON repository, MIT): 100 chest X-ray cases, two candidates each,
annotated by three radiologists.

Files, in one folder: `preference_data.json` (the cases: reference, C1 and C2 reports,
indication) and `user_1.json`, `user_2.json`, `user_3.json` (one radiologist each:
per case and candidate, `finding_errors`, `missing_findings` and a 1-5 `rating`).

Counting, per radiologist and candidate (docs/agreement.md, "RadPref"):
- a false finding (`error_type` "false") is one error, clinically significant when its
  `clinical_significance` is `urgent` or `actionable_not_urgent`;
- an attribute error (`error_type` "attribute") is one error per attribute it names
  (location, severity, ...), significant when that attribute is marked `significant`;
- a missing finding is one error, significant by its `clinical_significance` as above.
The endpoint is the mean of the radiologists' counts; `new_finding_indices` is not used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from radmatch_audit.agreement.annotations import AnnotationError, AnnotationSet, Case, Endpoint

SIGNIFICANT = frozenset({"urgent", "actionable_not_urgent"})
SLOTS = ("C1", "C2")
CASE_KEYS = ("id", "ground_truth_report", "C1_report", "C2_report")

ENDPOINTS = [
    Endpoint("total", "total errors"),
    Endpoint("significant", "clinically significant errors"),
    Endpoint("false", "significant: false finding"),
    Endpoint("missing", "significant: missing finding"),
    Endpoint("attribute", "significant: attribute error"),
]


def _objects(marked: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The objects under `marked[key]` (an object of objects, or absent)."""
    entries = marked.get(key) or {}
    if not isinstance(entries, dict):
        raise AnnotationError(f"'{key}' must be an object, got {type(entries).__name__}")
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise AnnotationError(f"'{key}' entry {name!r} must be an object, got {type(entry).__name__}")
    return list(entries.values())


def count_errors(marked: dict[str, Any]) -> dict[str, int]:
    """One radiologist's counts for one candidate (the keys of ENDPOINTS).

    Raises AnnotationError, naming the key, at a value of the wrong kind."""
    counts = dict.fromkeys(("total", "significant", "false", "missing", "attribute"), 0)
    for error in _objects(marked, "finding_errors"):
        kind = error.get("error_type")
        if kind == "false":
            counts["total"] += 1
            if error.get("clinical_significance") in SIGNIFICANT:
                counts["significant"] += 1
                counts["false"] += 1
        elif kind == "attribute":
            attributes = error.get("attributes") or {}
            if not isinstance(attributes, dict):
                raise AnnotationError(f"'attributes' must be an object, got {type(attributes).__name__}")
            for grade in attributes.values():
                counts["total"] += 1
                if grade == "significant":
                    counts["significant"] += 1
                    counts["attribute"] += 1
        else:
            raise AnnotationError(f"unknown error_type {kind!r} (expected 'false' or 'attribute')")
    for missing in _objects(marked, "missing_findings"):
        counts["total"] += 1
        if missing.get("clinical_significance") in SIGNIFICANT:
            counts["significant"] += 1
            counts["missing"] += 1
    return counts


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AnnotationError(f"{path}: not found (a RadPref folder holds preference_data.json "
                              "and user_1.json, user_2.json, user_3.json)") from None
    except ValueError as exc:
        raise AnnotationError(f"{path}: not valid JSON ({exc})") from None


def pair_id(case_id: str, slot: str) -> str:
    return f"{case_id}/{slot}"


def load_radpref(folder: str | Path) -> AnnotationSet:
    root = Path(folder)
    if not root.is_dir():
        raise AnnotationError(f"{root}: RadPref annotations are a folder (preference_data.json, user_N.json)")
    cases = _read_json(root / "preference_data.json")
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise AnnotationError(f"{root / 'preference_data.json'}: expected a list of case objects")
    for i, case in enumerate(cases):
        missing = [k for k in CASE_KEYS if k not in case]
        if missing:
            raise AnnotationError(f"{root / 'preference_data.json'}: case {i} lacks {missing}")
    users = sorted(root.glob("user_*.json"))
    if not users:
        raise AnnotationError(f"{root}: no user_N.json annotation file")
    raters: list[dict[str, Any]] = []
    for path in users:
        doc = _read_json(path)
        if not isinstance(doc, dict) or not isinstance(doc.get("annotations"), dict):
            raise AnnotationError(f"{path}: expected an object with an 'annotations' object")
        raters.append(doc["annotations"])

    endpoints = list(ENDPOINTS) + [
        Endpoint(f"significant_r{k}", f"clinically significant errors, radiologist {k}")
        for k in range(1, len(raters) + 1)
    ]
    out = AnnotationSet("radpref", endpoints, {}, raters=len(raters))
    for case in cases:
        cid = str(case["id"])
        for slot in SLOTS:
            per_rater, ratings = [], []
            for path, marks in zip(users, raters):
                case_marks = marks.get(cid) or {}
                if not isinstance(case_marks, dict):
                    raise AnnotationError(f"{path}: case {cid}: expected an object of candidates, "
                                          f"got {type(case_marks).__name__}")
                marked = case_marks.get(slot)
                if not isinstance(marked, dict):
                    per_rater.append(None)
                    continue
                try:
                    per_rater.append(count_errors(marked))
                except AnnotationError as exc:
                    raise AnnotationError(f"{path}: case {cid} {slot}: {exc}") from None
                if isinstance(marked.get("rating"), (int, float)):
                    ratings.append(float(marked["rating"]))
            present = [c for c in per_rater if c is not None]
            pid = pair_id(cid, slot)
            out.rows.append({
                "pair_id": pid, "study_id": cid, "modality": "chest_xray",
                "reference": case["ground_truth_report"], "candidate": case[f"{slot}_report"],
                "indication": (case.get("Indication") or None),
            })
            if not present:
                out.notes.append(f"{pid}: no radiologist annotated it")
                continue
            targets = {e.key: sum(c[e.key] for c in present) / len(present) for e in ENDPOINTS}
            for k, counts in enumerate(per_rater, 1):
                if counts is not None:
                    targets[f"significant_r{k}"] = float(counts["significant"])
            out.cases[pid] = Case(pid, cid, targets, sum(ratings) / len(ratings) if ratings else None)
        out.comparisons.append((pair_id(cid, "C1"), pair_id(cid, "C2")))
    return out
