"""Decoding schemas: caps per judge profile, and the shapes grammar backends can compile."""

import json

import pytest
from pydantic import ValidationError

from radmatch.decoding import SERVER_LIMITS, SMALL_MODEL_LIMITS, answer_models
from radmatch.pipeline import _validate
from radmatch.judges.base import InvalidAnswerError


def schema_text(limits, stage, rows=None):
    return json.dumps(answer_models(limits).for_stage(stage, rows).model_json_schema())


@pytest.mark.parametrize("stage", ["extract", "match", "grade", "indication"])
def test_served_schemas_leave_outer_lists_and_strings_free(stage):
    # a bounded repetition of a large item made vLLM's outlines backend time out (HTTP 500)
    text = schema_text(SERVER_LIMITS, stage, rows=3)
    assert "maxLength" not in text
    schema = json.loads(text)
    for key in ("findings", "matches", "errors_per_match"):
        if key in schema["properties"]:
            assert "maxItems" not in schema["properties"][key]


def test_small_model_schema_caps_every_list_and_string():
    extract = json.loads(schema_text(SMALL_MODEL_LIMITS, "extract"))
    assert extract["properties"]["findings"]["maxItems"] == SMALL_MODEL_LIMITS.findings
    finding = extract["$defs"]["Finding"]["properties"]
    assert finding["text"]["maxLength"] == SMALL_MODEL_LIMITS.text
    assert finding["evidence"]["items"]["maxLength"] == SMALL_MODEL_LIMITS.quote
    grade = json.loads(schema_text(SMALL_MODEL_LIMITS, "grade", rows=3))
    assert grade["properties"]["errors_per_match"]["minItems"] == 3
    assert grade["properties"]["errors_per_match"]["maxItems"] == 3


def test_decoded_answers_are_strict():
    model = answer_models(SERVER_LIMITS).extract
    with pytest.raises(ValidationError):
        model.model_validate({"findings": [], "extra": 1})
    with pytest.raises(ValidationError):
        model.model_validate({"findings": [{"text": "x.", "clinical_status": "maybe",
                                            "clinical_significance": "routine"}]})


def test_canonical_caps_are_checked_after_decoding():
    finding = {"text": "Nodule.", "clinical_status": "abnormal", "clinical_significance": "notable",
               "comparison": None, "measurements": [], "evidence": []}
    too_many = json.dumps({"findings": [finding] * 61})
    schema = answer_models(SERVER_LIMITS).extract
    schema.model_validate_json(too_many)  # the grammar allowed it...
    with pytest.raises(InvalidAnswerError, match="findings: List should have at most 60 items"):
        _validate(schema, too_many, "extract", None)  # ...the canonical cap does not
    _validate(schema, json.dumps({"findings": [finding] * 60}), "extract", None)


def test_ids_must_look_like_pipeline_ids():
    model = answer_models(SMALL_MODEL_LIMITS).match
    ok = {"matches": [{"pred_id": "p_1", "gt_id": "gt_12", "reasoning": "same", "match_scope": "direct"}],
          "unmatched_pred": [], "unmatched_gt": []}
    model.model_validate(ok)
    ok["matches"][0]["pred_id"] = "finding one"
    with pytest.raises(ValidationError):
        model.model_validate(ok)
