"""RadEvalExpert (the RadEval authors' expert set): one CSV row per study section, three
candidates each, annotated for significant and insignificant errors in seven categories.
Nothing is downloaded: pass the CSV you obtained.

Columns as distributed (`reader_study_final_with_annotationsv3.csv`): `annotator`,
`type` (findings or impression), `ground_truth`, `images_path`, `prediction1` to
`prediction3` and `annotation1` to `annotation3` (the radiologist's counts for each
prediction).

The layout of an annotation cell is not publicly described. It is read as either a
JSON object `{"significant": {...}, "insignificant": {...}}` keyed by category number
(1-7) or name, or as text with a "significant" and an "insignificant" heading, each
followed by numbered category lines ending in a count ("3. ... location ...: 1").
A cell read neither way leaves that pair out (never counted as zero), and the
number of such cells is reported; when no cell can be read the load fails.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Optional

from radmatch_audit.agreement.annotations import (
    AnnotationError, AnnotationSet, Case, Endpoint, require_columns,
)

SLOTS = (1, 2, 3)
COLUMNS = ["annotator", "type", "ground_truth", "images_path",
           *(f"prediction{k}" for k in SLOTS), *(f"annotation{k}" for k in SLOTS)]
CATEGORIES = {
    1: "false prediction of finding",
    2: "omission of finding",
    3: "incorrect location/position of finding",
    4: "incorrect severity of finding",
    5: "spurious comparison (not in the reference)",
    6: "omission of change from a previous study",
    7: "inarticulate report (grammar/readability)",
}
ENDPOINTS = [
    Endpoint("total", "total errors"),
    Endpoint("significant", "clinically significant errors"),
    Endpoint("insignificant", "clinically insignificant errors"),
    Endpoint("significant_findings", "significant errors, findings section"),
    Endpoint("significant_impression", "significant errors, impression section"),
] + [Endpoint(f"category_{k}", f"significant: {name}") for k, name in CATEGORIES.items()]

_HEADING = re.compile(r"^\W*(clinically\s+)?(?P<kind>insignificant|significant)\b[^:]*:?\s*$", re.I)
_LINE = re.compile(r"^\s*\(?(?P<cat>[1-7a-g])[.)]\s*(?P<rest>.*?)[:=]?\s*(?P<n>\d+)\s*[.;]?\s*$", re.I)


def _category(key: str) -> Optional[int]:
    key = key.strip().lower()
    if key.isdigit() and int(key) in CATEGORIES:
        return int(key)
    if len(key) == 1 and "a" <= key <= "g":
        return ord(key) - ord("a") + 1
    for number, name in CATEGORIES.items():
        if key and (key in name or name.split(" ")[0] == key.split(" ")[0]):
            return number
    return None


def parse_cell(cell: str) -> Optional[dict[str, dict[int, float]]]:
    """{"significant": {category: count}, "insignificant": {...}}, or None when unreadable."""
    text = (cell or "").strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            return None
        out: dict[str, dict[int, float]] = {"significant": {}, "insignificant": {}}
        for kind in out:
            part = data.get(kind) if isinstance(data, dict) else None
            if not isinstance(part, dict):
                return None
            for key, value in part.items():
                number = _category(str(key))
                if number is None or not isinstance(value, (int, float)) or isinstance(value, bool):
                    return None
                out[kind][number] = float(value)
        return out
    out = {"significant": {}, "insignificant": {}}
    kind = None
    for line in text.splitlines():
        if not line.strip():
            continue
        heading = _HEADING.match(line)
        if heading:
            kind = heading.group("kind").lower()
            continue
        match = _LINE.match(line)
        if not match or kind is None:
            return None
        out[kind][_category(match.group("cat"))] = float(match.group("n"))
    return out if out["significant"] or out["insignificant"] else None


def pair_id(row: int, slot: int) -> str:
    return f"radevalexpert-{row}/{slot}"


def load_radevalexpert(path: str | Path) -> AnnotationSet:
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("*.csv"))
        if len(found) != 1:
            raise AnnotationError(f"{path}: expected one RadEvalExpert CSV in the folder, found {len(found)}")
        path = found[0]
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            require_columns(str(path), list(reader.fieldnames or []), COLUMNS, "RadEvalExpert")
            rows = list(reader)
    except FileNotFoundError:
        raise AnnotationError(f"{path}: not found") from None
    out = AnnotationSet("radevalexpert", list(ENDPOINTS), {}, raters=1)
    unreadable = 0
    for number, row in enumerate(rows):
        # the study is the image set: rows of one image set (its findings and impression
        # sections, several annotators) are resampled together by the bootstrap
        images = (row.get("images_path") or "").strip()
        sid = f"radevalexpert:{images}" if images else f"radevalexpert-{number}"
        section = (row["type"] or "").strip().lower()
        for slot in SLOTS:
            pid = pair_id(number, slot)
            out.rows.append({"pair_id": pid, "study_id": sid, "modality": "chest_xray",
                             "reference": row["ground_truth"], "candidate": row[f"prediction{slot}"]})
            counts = parse_cell(row[f"annotation{slot}"])
            if counts is None:
                unreadable += 1
                continue
            significant = sum(counts["significant"].values())
            insignificant = sum(counts["insignificant"].values())
            targets = {"total": significant + insignificant, "significant": significant,
                       "insignificant": insignificant}
            if section.startswith("finding"):
                targets["significant_findings"] = significant
            elif section.startswith("impression"):
                targets["significant_impression"] = significant
            for k in CATEGORIES:
                targets[f"category_{k}"] = counts["significant"].get(k, 0.0)
            out.cases[pid] = Case(pid, sid, targets)
    if rows and not out.cases:
        raise AnnotationError(
            f"{path}: none of the {3 * len(rows)} annotation cells could be read as counts "
            "(docs/agreement.md, 'RadEvalExpert', gives the layouts understood)"
        )
    if unreadable:
        out.notes.append(f"{unreadable} annotation cell(s) could not be read as counts; "
                         "their pairs are left out")
    return out
