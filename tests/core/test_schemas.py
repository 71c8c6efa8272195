"""Answer models: one definition, caps per judge profile, and validation on arrival."""

import json
import re

import pytest
from pydantic import ValidationError

from builders import f, matching, pos, record, row
from radmatch_audit.read.recompute import score_record
from radmatch_audit.core.schemas import (
    ANSWER_MODELS,
    CANONICAL_LIMITS,
    SERVER_LIMITS,
    SMALL_MODEL_LIMITS,
    answer_models,
    validation_models,
)

FINDING = {"text": "Nodule.", "clinical_status": "abnormal", "clinical_significance": "notable",
           "comparison": None, "measurements": [], "evidence": []}


def schema_text(limits, stage, rows=None):
    return json.dumps(answer_models(limits).for_stage(stage, rows).model_json_schema())


@pytest.mark.parametrize("stage", ["extract", "match", "grade"])
def test_served_schemas_leave_outer_lists_free_and_bound_strings(stage):
    # a bounded repetition of a large item made vLLM's outlines backend time out (HTTP 500);
    # bounded strings cost xgrammar, the served backend, one compile of 14-18 s a schema
    # per server, and end a repetition loop inside a string at its cap (serve/README.md)
    text = schema_text(SERVER_LIMITS, stage, rows=3)
    lengths = {int(n) for n in re.findall(r'"maxLength": (\d+)', text)}
    assert lengths and lengths <= {CANONICAL_LIMITS.text, CANONICAL_LIMITS.quote,
                                   CANONICAL_LIMITS.unit, CANONICAL_LIMITS.reasoning}
    for field in ("text", "quote", "unit", "reasoning", "indication"):
        assert getattr(SERVER_LIMITS, field) == getattr(CANONICAL_LIMITS, field)
    schema = json.loads(text)
    for key in ("findings", "matches", "grades"):
        if key in schema["properties"]:
            assert "maxItems" not in schema["properties"][key]


def test_small_model_schema_caps_every_list_and_string():
    extract = json.loads(schema_text(SMALL_MODEL_LIMITS, "extract"))
    assert extract["properties"]["findings"]["maxItems"] == SMALL_MODEL_LIMITS.findings
    finding = extract["$defs"]["Finding"]["properties"]
    assert finding["text"]["maxLength"] == SMALL_MODEL_LIMITS.text
    assert finding["evidence"]["items"]["maxLength"] == SMALL_MODEL_LIMITS.quote
    unit = extract["$defs"]["Measurement"]["properties"]["unit"]["anyOf"][0]
    assert unit["maxLength"] == SMALL_MODEL_LIMITS.unit
    grade = json.loads(schema_text(SMALL_MODEL_LIMITS, "grade", rows=3))  # a number: ids free
    assert grade["properties"]["grades"]["minItems"] == 3
    assert grade["properties"]["grades"]["maxItems"] == 3
    entry = grade["$defs"]["GradeEntry"]["properties"]
    assert list(entry) == ["pred_id", "gt_id", "errors"]
    assert entry["errors"]["maxItems"] == SMALL_MODEL_LIMITS.errors_per_match


def test_every_profile_is_the_one_definition_with_other_caps():
    """Same fields, enums and required keys in every profile; only the caps differ."""
    def shape(node):
        if isinstance(node, dict):
            return {k: shape(v) for k, v in node.items() if k not in ("maxItems", "maxLength", "minItems")}
        if isinstance(node, list):
            return [shape(v) for v in node]
        return node

    for stage in ANSWER_MODELS:
        shapes = {json.dumps(shape(json.loads(schema_text(limits, stage))), sort_keys=True)
                  for limits in (CANONICAL_LIMITS, SERVER_LIMITS, SMALL_MODEL_LIMITS)}
        assert len(shapes) == 1, stage
    assert answer_models(CANONICAL_LIMITS).extract is ANSWER_MODELS["extract"]


def test_answers_are_strict():
    model = answer_models(SERVER_LIMITS).extract
    with pytest.raises(ValidationError):
        model.model_validate({"findings": [], "extra": 1})
    with pytest.raises(ValidationError):
        model.model_validate({"findings": [{**FINDING, "clinical_status": "maybe"}]})


def test_a_served_answer_is_validated_against_the_canonical_caps_too():
    too_many = json.dumps({"findings": [FINDING] * 61})
    answer_models(SERVER_LIMITS).extract.model_validate_json(too_many)  # the grammar allowed it...
    validator = validation_models(SERVER_LIMITS).extract
    with pytest.raises(ValidationError, match="at most 60 items"):
        validator.model_validate_json(too_many)  # ...the canonical cap does not
    validator.model_validate_json(json.dumps({"findings": [FINDING] * 60}))
    # and where the grammar is the tighter (8 measurements), the grammar's cap holds
    value = {"value": 1.0, "unit": "mm", "category": "size", "prior": False}
    with pytest.raises(ValidationError):
        validator.model_validate({"findings": [{**FINDING, "measurements": [value] * 9}]})


def grades(*rows):
    return {"grades": [{"pred_id": p, "gt_id": g, "errors": []} for p, g in rows]}


def test_grading_is_held_to_every_row_sent_once_by_id_whatever_the_grammar():
    sent = [("p_1", "gt_1"), ("p_2", "gt_3")]
    validator = validation_models(SERVER_LIMITS).for_stage("grade", rows=sent)
    validator.model_validate(grades(("p_1", "gt_1"), ("p_2", "gt_3")))
    validator.model_validate(grades(("p_2", "gt_3"), ("p_1", "gt_1")))  # keyed: order is free
    for wrong, why in (
        (grades(("p_1", "gt_1")), "no entry for row(s) p_2-gt_3"),
        (grades(("p_1", "gt_1"), ("p_2", "gt_3"), ("p_1", "gt_1")), "p_1-gt_1 more than once"),
        # a skipped row plus an extra one elsewhere: positional answers misaligned silently
        (grades(("p_1", "gt_1"), ("p_2", "gt_2")), "p_2-gt_2, a row that was not sent"),
    ):
        with pytest.raises(ValidationError, match=re.escape(why)):
            validator.model_validate(wrong)
    # the served grammar itself fixes neither the length nor the ids (bounded repetition is costly)
    assert "minItems" not in schema_text(SERVER_LIMITS, "grade", rows=sent)
    assert "const" not in schema_text(SERVER_LIMITS, "grade", rows=sent)


def test_the_small_judges_grammar_fixes_each_entrys_ids_to_the_rows_sent():
    # with id patterns SmolLM2 numbered its entries p_1-gt_1, p_2-gt_2 whatever the rows
    sent = [("p_1", "gt_2"), ("p_3", "gt_1")]
    grammar = answer_models(SMALL_MODEL_LIMITS).for_stage("grade", rows=sent)
    schema = grammar.model_json_schema()
    items = [schema["$defs"][ref["$ref"].split("/")[-1]] for ref in schema["properties"]["grades"]["prefixItems"]]
    assert [(i["properties"]["pred_id"]["const"], i["properties"]["gt_id"]["const"]) for i in items] == sent
    assert schema["properties"]["grades"]["minItems"] == schema["properties"]["grades"]["maxItems"] == 2
    grammar.model_validate(grades(*sent))
    with pytest.raises(ValidationError):
        grammar.model_validate(grades(("p_1", "gt_1"), ("p_3", "gt_1")))
    assert answer_models(SMALL_MODEL_LIMITS).for_stage("grade", rows=list(sent)) is grammar  # compiled once


def test_grading_errors_give_their_reasoning_before_the_verdict():
    for limits in (CANONICAL_LIMITS, SERVER_LIMITS, SMALL_MODEL_LIMITS):
        schema = json.loads(schema_text(limits, "grade"))
        assert list(schema["$defs"]["GradingError"]["properties"]) == ["reasoning", "dimension", "severity"]
    row = json.loads(schema_text(CANONICAL_LIMITS, "match"))["$defs"]["MatchRow"]["properties"]
    assert list(row).index("reasoning") < list(row).index("match_scope")


def test_ids_must_look_like_pipeline_ids():
    model = answer_models(SMALL_MODEL_LIMITS).match
    ok = {"matches": [{"pred_id": "p_1", "gt_id": "gt_12", "reasoning": "same", "match_scope": "direct"}],
          "unmatched_pred": [], "unmatched_gt": []}
    model.model_validate(ok)
    ok["matches"][0]["pred_id"] = "finding one"
    with pytest.raises(ValidationError):
        model.model_validate(ok)


@pytest.mark.parametrize("limits", [CANONICAL_LIMITS, SERVER_LIMITS, SMALL_MODEL_LIMITS])
def test_every_answer_profile_admits_position(limits):
    extract = answer_models(limits).extract
    schema = json.dumps(extract.model_json_schema())
    assert '"position"' in schema  # what the server and small-model grammars are built from
    finding = {"text": "Endotracheal tube tip 5 cm above the carina.", "clinical_status": "abnormal",
               "clinical_significance": "routine", "comparison": None, "evidence": ["ETT"],
               "measurements": [{"value": 5, "unit": "cm", "category": "position"}]}
    assert extract.model_validate({"findings": [finding]})


def test_records_store_and_read_position_values():
    rec = score_record(record("p", [f("gt_1", measurements=[pos(5, "cm")])],
                              [f("p_1", measurements=[pos(3, "cm")])], matching([row("p_1", "gt_1")])))
    from radmatch_audit.files.record_io import parse_record

    again = parse_record(rec.to_json())
    assert again.stages.candidate_findings[0].measurements[0].category == "position"
    assert again.scores == rec.scores
