"""stages/stage.py: RadMatch's stages in the order a pair runs them, each with its budget,
its place on the chain of calls, its prompt and its answer models under its caps."""

from __future__ import annotations

import pytest

from radmatch_audit.core.schemas import (
    SERVER_LIMITS,
    SERVER_MAX_TOKENS,
    SMALL_MODEL_LIMITS,
    answer_models,
)
from radmatch_audit.stages.prompt import stage_prompt
from radmatch_audit.stages.stage import CHAIN, pair_stages


def test_the_stages_run_in_order_with_the_servers_budgets_and_their_chains():
    stages = pair_stages()
    assert list(stages) == ["extract", "match", "grade", "adjudicate"]
    assert {name: s.max_tokens for name, s in stages.items()} == SERVER_MAX_TOKENS
    assert [s.chain for s in stages.values()] == [4, 3, 2, 1] == list(CHAIN.values())


def test_adjudication_can_be_left_out_and_a_budget_overridden_alone():
    stages = pair_stages(max_tokens={"grade": 512}, adjudication=False)
    assert list(stages) == ["extract", "match", "grade"]
    assert stages["grade"].max_tokens == 512
    assert stages["extract"].max_tokens == SERVER_MAX_TOKENS["extract"]


def test_a_stage_gives_its_own_prompt_and_answer_models():
    extract = pair_stages()["extract"]
    assert extract.prompt("chest_ct") == stage_prompt("extract", "chest_ct")
    assert extract.prompt("chest_ct").version != pair_stages()["match"].prompt("chest_ct").version
    assert extract.grammar() is answer_models(SERVER_LIMITS).extract
    grade = pair_stages()["grade"]
    rows = [("p_1", "gt_1"), ("p_2", "gt_2")]
    validator = grade.validator(rows)
    good = {"grades": [{"pred_id": p, "gt_id": g, "errors": []} for p, g in reversed(rows)]}
    validator.model_validate(good)  # any order, each row once
    bad = {"grades": [{"pred_id": "p_1", "gt_id": "gt_1", "errors": []}] * 2}
    with pytest.raises(ValueError):
        validator.model_validate(bad)


def test_the_caps_given_are_the_caps_of_every_stage():
    stages = pair_stages(limits=SMALL_MODEL_LIMITS)
    assert all(s.limits is SMALL_MODEL_LIMITS for s in stages.values())
    assert stages["match"].grammar() is answer_models(SMALL_MODEL_LIMITS).match
    assert stages["match"].grammar() is not answer_models(SERVER_LIMITS).match
