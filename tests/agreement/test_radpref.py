"""agreement/radpref.py: the shipped RadPref sample read into pairs and the radiologists'
mean counts (docs/agreement.md, "RadPref")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from radmatch_audit.agreement.annotations import AnnotationError
from radmatch_audit.agreement.radpref import count_errors, load_radpref

RADPREF = Path(__file__).resolve().parents[1] / "data" / "radpref"  # shipped: see its README.md


def test_count_errors_counts_false_findings_attributes_and_missing_findings():
    marked = {
        "finding_errors": {
            "0": {"error_type": "false", "clinical_significance": "urgent"},
            "1": {"error_type": "false", "clinical_significance": "not_actionable_not_urgent"},
            "2": {"error_type": "attribute", "attributes": {"location": "significant", "size": "minor"}},
        },
        "missing_findings": {"0": {"clinical_significance": "actionable_not_urgent"}},
        "rating": 2,
    }
    assert count_errors(marked) == {"total": 5, "significant": 3, "false": 1, "missing": 1, "attribute": 1}
    with pytest.raises(AnnotationError, match="unknown error_type 'wrong'"):
        count_errors({"finding_errors": {"0": {"error_type": "wrong"}}})


def test_the_shipped_sample_gives_two_pairs_per_case_and_the_radiologists_mean():
    cases = json.loads((RADPREF / "preference_data.json").read_text(encoding="utf-8"))
    read = load_radpref(RADPREF)
    assert read.raters == 3 and read.notes == []
    assert len(read.rows) == len(read.cases) == 2 * len(cases) and len(read.comparisons) == len(cases)
    first = read.rows[0]
    assert first["pair_id"] == f"{cases[0]['id']}/C1" and first["candidate"] == cases[0]["C1_report"]
    assert first["reference"] == cases[0]["ground_truth_report"]
    for case in read.cases.values():
        each = [case.targets[f"significant_r{k}"] for k in (1, 2, 3)]
        assert case.targets["significant"] == pytest.approx(sum(each) / 3)


def test_a_candidate_no_radiologist_annotated_is_a_note_not_a_case(tmp_path):
    folder = tmp_path / "radpref"
    shutil.copytree(RADPREF, folder)
    case_id = json.loads((folder / "preference_data.json").read_text(encoding="utf-8"))[0]["id"]
    for user in sorted(folder.glob("user_*.json")):
        doc = json.loads(user.read_text(encoding="utf-8"))
        del doc["annotations"][case_id]["C2"]
        user.write_text(json.dumps(doc), encoding="utf-8")
    read = load_radpref(folder)
    assert read.notes == [f"{case_id}/C2: no radiologist annotated it"]
    assert f"{case_id}/C2" not in read.cases and f"{case_id}/C1" in read.cases
