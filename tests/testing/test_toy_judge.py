"""testing/toy_judge.py: the fake judge's answers, one per stage, are valid answers of the
real answer models (the validators the call path uses), worked out from the prompt."""

from __future__ import annotations

import pytest
from builders import fig3_record

from radmatch_audit.core.schemas import (
    SERVER_LIMITS,
    answer_models,
    number_findings,
    validation_models,
)
from radmatch_audit.scoring.record import score_record
from radmatch_audit.stages.adjudication import adjudication_input
from radmatch_audit.stages.prompt import finding_view
from radmatch_audit.testing.toy_judge import STAGES, toy_answer

GRAMMAR, VALIDATOR = answer_models(SERVER_LIMITS), validation_models(SERVER_LIMITS)


def answer(stage: str, user: dict, rows=None):
    """The toy answer for `stage`, validated as the call path validates a judge's answer."""
    schema = GRAMMAR.for_stage(stage, rows)
    return VALIDATOR.for_stage(stage, rows).model_validate(toy_answer(schema.__name__, user, schema.model_json_schema()))


def extract(report: str, prefix: str):
    return number_findings(answer("extract", {"report": report, "indication": None}).findings, prefix)


def test_the_schema_titles_are_the_answer_models_names():
    assert STAGES == tuple(GRAMMAR.for_stage(stage).__name__ for stage in ("extract", "match", "grade", "adjudicate"))


def test_extract_match_and_grade_answers_are_valid_and_follow_the_sentences():
    gt = extract("FINDINGS: Left effusion measuring 12 mm. No pneumothorax.", "gt")
    assert [(f.clinical_status, [m.value for m in f.measurements]) for f in gt] == [
        ("abnormal", [12.0]), ("normal", [])]
    pred = extract("No pneumothorax. Mild cardiomegaly.", "p")
    matching = answer("match", {"indication": None, "gt_findings": [finding_view(f) for f in gt],
                                "pred_findings": [finding_view(f) for f in pred]})
    assert [(r.pred_id, r.gt_id) for r in matching.matches] == [("p_1", "gt_2")]
    assert matching.unmatched_pred == ["p_2"] and matching.unmatched_gt == ["gt_1"]
    views = {f.id: finding_view(f) for f in gt + pred}
    rows = [("p_1", "gt_2")]
    grading = answer("grade", {"indication": None, "pairs": [
        {"pred_finding": views[p], "gt_finding": views[g]} for p, g in rows]}, rows)
    assert [(g.pred_id, g.gt_id, g.errors) for g in grading.grades] == [("p_1", "gt_2", [])]


def test_an_adjudication_answer_is_valid_and_counts_an_abnormal_non_partial_unit_as_one_error():
    user, stage = adjudication_input(score_record(fig3_record()))
    adjudication = answer("adjudicate", user, len(stage.units))
    kinds = [unit["kind"] for unit in user["units"]]
    assert [unit.unit for unit in adjudication.units] == list(range(1, len(kinds) + 1))
    assert [unit.errors for unit in adjudication.units] == [int(kind != "PAR") for kind in kinds]
    assert "PAR" in kinds and "INC" in kinds


def test_an_unknown_schema_is_refused():
    with pytest.raises(ValueError, match="unknown schema 'GuessAnswer'"):
        toy_answer("GuessAnswer", {}, {})


def test_each_synthetic_sentence_is_one_toy_finding():
    """testing.reports' sentences build the benchmarks' reports: the toy judge must read
    each as one finding, or the benchmarks' calls per pair would drift."""
    from radmatch_audit.core.schemas import SERVER_LIMITS, answer_models
    from radmatch_audit.testing.reports import INDICATIONS, SENTENCES

    schema = answer_models(SERVER_LIMITS).extract.model_json_schema()
    for sentence in SENTENCES:
        (finding,) = toy_answer("ExtractionAnswer", {"report": sentence}, schema)["findings"]
        assert finding["evidence"] == [sentence.rstrip(".")[:100]]
    assert all(i.endswith(".") for i in INDICATIONS) and len(set(SENTENCES)) == len(SENTENCES)
