"""Which count the metric and the reward report: `score="significant"|"actionable"`, and the
one-call count (`method="count"`) where cost rules.

The adjudicated count is the headline where the adjudication runs; the paper's
`actionable_errors` is always given beside it; a pair without the chosen count (failed,
or its adjudication failed) is None in the metric and `failed_reward` in the reward,
never 0 errors.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")

import pytest

from radmatch_audit.judges.base import JudgeError
from radmatch_audit.hf.metric import MetricScorer
from radmatch_audit.core.records import BaselineRecord
from radmatch_audit.hf.reward import radmatch_reward
from radmatch_audit.testing.scripted import ScriptedJudge

REF = "Small right pleural effusion. No pneumothorax. Heart size is normal."
SAME = REF
MISSED = "No pneumothorax. Heart size is normal. Large mass in the left lung."


class CountingJudge(ScriptedJudge):
    """Answers the count baseline with a fixed count; the RadMatch stages as scripted."""

    async def generate(self, messages, schema, *, max_tokens):
        if schema.__name__ == "CountAnswer":
            self.calls.append(("baseline_count", {}))
            from radmatch_audit.judges.base import JudgeResult, Usage
            return JudgeResult(text='{"errors": 3}', usage=Usage(prompt_tokens=10, completion_tokens=3))
        return await super().generate(messages, schema, max_tokens=max_tokens)


class FailingAdjudication(ScriptedJudge):
    async def generate(self, messages, schema, *, max_tokens):
        if schema.__name__ == "AdjudicationAnswer":
            raise JudgeError("down")
        return await super().generate(messages, schema, max_tokens=max_tokens)


def test_the_metric_reports_both_counts_with_the_adjudicated_one_as_headline():
    out = MetricScorer(judge=ScriptedJudge(), cache=False).compute([SAME, MISSED], [REF, REF])
    assert out["score"] == "significant"
    assert out["significant_errors"] == [0, 2] and out["errors"] == out["significant_errors"]
    assert out["actionable_errors"][0] == 0 and out["actionable_errors"][1] >= 1
    assert out["mean_errors"] == out["mean_significant_errors"] == 1.0


def test_score_actionable_picks_the_papers_count():
    out = MetricScorer(judge=ScriptedJudge(), cache=False, score="actionable").compute([MISSED], [REF])
    assert out["score"] == "actionable" and out["errors"] == out["actionable_errors"]


def test_without_the_adjudication_the_headline_is_the_papers_count_and_significant_is_refused():
    out = MetricScorer(judge=ScriptedJudge(), cache=False, adjudication=False).compute([MISSED], [REF])
    assert out["score"] == "actionable" and out["significant_errors"] == [None]
    with pytest.raises(ValueError, match="needs the error adjudication"):
        MetricScorer(judge=ScriptedJudge(), adjudication=False, score="significant")
    with pytest.raises(ValueError, match="'score' option .* must be one of"):
        MetricScorer(judge=ScriptedJudge(), score="tiers")


def test_method_count_makes_one_call_a_pair_and_reports_its_count():
    judge = CountingJudge()
    out = MetricScorer(judge=judge, cache=False, method="count").compute([MISSED, SAME], [REF, REF])
    assert [stage for stage, _ in judge.calls] == ["baseline_count", "baseline_count"]
    assert out["method"] == "count" and out["errors"] == [3, 3] and out["mean_errors"] == 3.0
    assert out["judge_calls"] == 2 and "actionable_errors" not in out
    assert all(r["record_type"] == "baseline" for r in out["records"])
    with pytest.raises(ValueError, match="'method' option .* must be one of"):
        MetricScorer(judge=judge, method="enumerate-ish")


def test_the_reward_uses_the_chosen_count_and_floors_a_failed_adjudication():
    reward = radmatch_reward(judge=FailingAdjudication(), cache=False, retries=1)
    rewards = reward(completions=[SAME, MISSED], reference=[REF, REF])
    assert rewards == [1.0, 0.0]  # the second has no significant count: failed_reward, not 1.0
    actionable = radmatch_reward(judge=FailingAdjudication(), cache=False, retries=1, score="actionable")
    rewards = actionable(completions=[MISSED], reference=[REF])
    errors = actionable.last_records[0].scores.actionable_errors
    assert rewards == [pytest.approx(1 / (1 + errors))] and errors >= 1


def test_the_reward_by_the_one_call_count():
    reward = radmatch_reward(judge=CountingJudge(), cache=False, method="count")
    assert reward(completions=[MISSED], reference=[REF]) == [pytest.approx(1 / 4)]
    assert isinstance(reward.last_records[0], BaselineRecord)


def test_the_reward_logs_both_means():
    logged = {}
    reward = radmatch_reward(judge=ScriptedJudge(), cache=False)
    reward(completions=[SAME, MISSED], reference=[REF, REF], log_metric=logged.__setitem__)
    assert logged["radmatch/mean_significant_errors"] == 1.0
    assert logged["radmatch/mean_actionable_errors"] >= 0.5
