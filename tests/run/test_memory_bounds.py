"""What a long run keeps per new input stays bounded (BENCHMARKS.md, "Memory of a long run")."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from radmatch_audit.core.schemas import SERVER_LIMITS, SMALL_MODEL_LIMITS, validation_models


@pytest.mark.parametrize("limits", [SERVER_LIMITS, SMALL_MODEL_LIMITS])
def test_grading_validators_share_one_model_whatever_the_rows(limits):
    models = validation_models(limits)
    checked = {
        models.for_stage("grade", [(f"p_{i}", f"gt_{j}") for j in range(1, n + 1)]).model
        for i in range(1, 40) for n in range(1, 6)
    }
    assert len(checked) == 1  # 195 sets of rows, one model: nothing accumulates per set


def test_each_validator_still_checks_its_own_rows():
    models = validation_models(SERVER_LIMITS)
    one = models.for_stage("grade", [("p_1", "gt_1")])
    other = models.for_stage("grade", [("p_2", "gt_2")])
    answer = '{"grades":[{"pred_id":"p_1","gt_id":"gt_1","errors":[]}]}'
    assert one.model_validate_json(answer).grades[0].pred_id == "p_1"
    with pytest.raises(ValidationError, match="a row that was not sent"):
        other.model_validate_json(answer)
