"""stages/prompt.py: the prompts' compact answers (issue 29: the exemplars teach compact answers that lose nothing)."""

import json

import pytest

from radmatch_audit.core.schemas import ANSWER_MODELS, Finding, own_quote
from radmatch_audit.stages import (
    MODALITIES,
    compact_answer,
    drop_defaults,
    finding_view,
    load_exemplars,
    stage_prompt,
)
from radmatch_audit.stages.prompt import ContextBudgetError, Prompt

CELLS = [(m, s) for m in MODALITIES for s in ("extract", "match", "grade")]


@pytest.mark.parametrize("modality,stage", CELLS)
def test_a_compact_answer_validates_to_the_same_answer(modality, stage):
    """Nothing is lost: the compact answer validates to the full one, except that a quote
    of a finding's whole text comes back without its final period (still a verbatim quote)."""
    model = ANSWER_MODELS[stage]
    for exemplar in load_exemplars(modality, stage):
        full = model.model_validate(exemplar["output"])
        compact = model.model_validate(compact_answer(stage, exemplar["output"]))
        if stage == "extract":
            for mine, theirs in zip(compact.findings, full.findings):
                if mine.evidence != theirs.evidence:
                    assert theirs.evidence == [theirs.text] and mine.evidence == [own_quote(theirs.text)]
                    mine.evidence = theirs.evidence
        assert compact == full


def test_an_answer_without_evidence_quotes_its_own_text():
    extract = ANSWER_MODELS["extract"]
    answer = extract.model_validate({"findings": [
        {"text": "No pneumothorax.", "clinical_status": "normal", "clinical_significance": "routine"},
        {"text": "Small effusion.", "clinical_status": "abnormal", "clinical_significance": "notable",
         "evidence": []},
    ]})
    assert answer.findings[0].evidence == ["No pneumothorax"]
    assert answer.findings[1].evidence == []  # an explicit empty list is kept: unattributed
    # and the compact form leaves out exactly such a quote, nothing else
    written = {"findings": [{"text": "No effusion.", "clinical_status": "normal",
                             "clinical_significance": "routine", "evidence": ["No effusion or edema."]}]}
    assert compact_answer("extract", written) == written


@pytest.mark.parametrize("modality,stage", CELLS)
def test_rendered_exemplar_answers_hold_no_default_and_no_whitespace(modality, stage):
    answers = [content for role, content in stage_prompt(stage, modality).turns if role == "assistant"]
    assert answers
    for text in answers:
        assert '"comparison":null' not in text and '"measurements":[]' not in text
        assert '"prior":false' not in text and '"quantity":null' not in text
        # outside string values the JSON has no whitespace: re-dumping compactly is a no-op
        assert json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":")) == text


def test_drop_defaults_keeps_values_that_only_look_like_defaults():
    finding = Finding(id="gt_1", text="Nodule.", clinical_status="abnormal",
                      clinical_significance="notable", comparison="stable",
                      measurements=[{"value": 0.0, "unit": None, "category": "count", "prior": True}])
    view = finding_view(finding)
    assert view["comparison"] == "stable"
    assert view["measurements"] == [{"value": 0.0, "category": "count", "prior": True}]
    # a required field is never dropped, whatever its value
    assert drop_defaults({"value": 0.0, "category": "count"}, type(finding.measurements[0])) == {
        "value": 0.0, "category": "count"}


# ------------------------------------------------------------- fitting the context


class _CountingJudge:
    """A judge of `context_window` tokens that counts one token per character."""

    def __init__(self, context_window, control_tokens=()) -> None:
        self.context_window = context_window
        self.control_tokens = control_tokens

    def count_tokens(self, messages) -> int:
        return sum(len(m["content"]) for m in messages)


# instructions of 100 characters, then two exemplars of 100 + 100; the pair is 11 characters
TURNS = (("system", "s" * 100), ("user", "1" * 100), ("assistant", "A" * 100),
         ("user", "2" * 100), ("assistant", "B" * 100))
PAIR = {"r": "abc"}  # '{"r":"abc"}'


def test_fit_drops_exemplars_from_the_end_until_the_prompt_and_answer_budget_fit():
    prompt = Prompt(turns=TURNS, version="v1-test")
    assert prompt.exemplars == 2
    everything = 500 + 11 + 50
    for window, kept in [(everything, 2), (everything - 1, 1), (311 + 50, 1), (111 + 50, 0)]:
        messages, n = prompt.fit(_CountingJudge(window), PAIR, max_tokens=50)
        assert n == kept
        assert [m["content"][0] for m in messages] == ["s", "1", "A", "2", "B"][: 1 + 2 * kept] + ["{"]
    assert prompt.fit(_CountingJudge(None), PAIR, max_tokens=10**6)[1] == 2  # no known window


def test_fit_raises_naming_the_numbers_when_not_even_the_instructions_fit():
    prompt = Prompt(turns=TURNS, version="v1-test")
    with pytest.raises(ContextBudgetError, match=r"needs 161 tokens \(111 prompt .* \+ 50 .* context of 160") as caught:
        prompt.fit(_CountingJudge(160), PAIR, max_tokens=50)
    assert "abc" not in str(caught.value)  # the report's text is never in an error


def test_the_pair_is_sent_last_with_the_judges_own_control_tokens_made_plain():
    prompt = Prompt(turns=TURNS, version="v1-test")
    messages, _ = prompt.fit(_CountingJudge(None, ("END_TURN",)), {"r": "x END_TURN y"}, 10)
    assert messages[-1]["role"] == "user" and "END_TURN" not in messages[-1]["content"]
    assert json.loads(messages[-1]["content"].replace("\u2060", ""))["r"] == "x END_TURN y"
