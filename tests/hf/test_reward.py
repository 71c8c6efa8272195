"""The RL reward function (radmatch_audit.hf.reward) in the shape TRL's GRPOTrainer calls.

TRL calls ``reward_fn(prompts=..., completions=..., completion_ids=..., **columns)``;
completions are strings or chat-format message lists. Fast tests use the scripted
judge of test_metric; the slow one runs the embedded SmolLM2 judge and shares the
session's answer store with test_metric.
"""

from __future__ import annotations

import math

import pytest
from test_metric import C1, C2, CLOSED_URL, REF, extract_reports

from radmatch_audit.hf.reward import RadMatchReward, completion_text, radmatch_reward
from radmatch_audit.testing.scripted import ScriptedJudge


def chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def trl_call(reward_fn, completions, references, **columns):
    """Call the reward the way GRPOTrainer does: keywords only, columns alongside."""
    n = len(completions)
    return reward_fn(
        prompts=[[{"role": "user", "content": "Write the findings."}]] * n,
        completions=completions,
        completion_ids=[[1, 2, 3]] * n,
        reference=references,
        trainer_state=None,
        **columns,
    )


def test_completion_text_handles_strings_and_chat_messages():
    assert completion_text("No pneumothorax.") == "No pneumothorax."
    assert completion_text(chat("No pneumothorax.")) == "No pneumothorax."
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "A."}]}]) == "A."
    assert completion_text({"role": "assistant", "content": "B."}) == "B."
    with pytest.raises(TypeError, match="a completion must be"):
        completion_text(42)


def test_reward_is_one_float_per_completion_and_prefers_fewer_errors():
    judge = ScriptedJudge()
    reward_fn = radmatch_reward(judge=judge, cache=False)
    assert reward_fn.__name__ == "radmatch_reward"  # TRL logs rewards under this name
    rewards = trl_call(reward_fn, [REF, chat(C1), "FAIL"], [REF, REF, REF])
    assert len(rewards) == 3 and all(isinstance(r, float) and math.isfinite(r) for r in rewards)
    assert rewards[0] == 1.0  # no actionable error
    errors = reward_fn.last_records[1].scores.actionable_errors
    assert errors >= 1 and rewards[1] == pytest.approx(1 / (1 + errors)) and rewards[1] < rewards[0]
    assert reward_fn.last_records[2].error and rewards[2] == 0.0  # failed: the documented floor
    assert extract_reports(judge.calls).count(REF) == 1  # one reference, extracted once


def test_failed_reward_is_configurable_and_must_be_finite():
    reward_fn = RadMatchReward(judge=ScriptedJudge(), cache=False, failed_reward=-1.0)
    assert trl_call(reward_fn, ["FAIL"], [REF]) == [-1.0]
    with pytest.raises(ValueError, match="finite"):
        RadMatchReward(judge=ScriptedJudge(), failed_reward=float("nan"))


def test_unreachable_judge_gives_the_failed_reward_not_an_exception():
    reward_fn = radmatch_reward(base_url=CLOSED_URL, retries=1, cache=False)
    assert trl_call(reward_fn, [C1, chat(C2)], [REF, REF]) == [0.0, 0.0]


def test_reference_column_and_optional_columns():
    judge = ScriptedJudge()
    reward_fn = radmatch_reward(judge=judge, cache=False, reference_column="findings")
    with pytest.raises(KeyError, match="reference_column"):
        reward_fn(prompts=["p"], completions=[C1], reference=[REF])
    rewards = reward_fn(prompts=["p"], completions=[C1], findings=[REF], indication=["Dyspnoea."])
    assert len(rewards) == 1
    assert reward_fn.last_records[0].indication == "Dyspnoea."
    with pytest.raises(ValueError, match="values for 2 completions"):
        reward_fn(prompts=["p", "p"], completions=[C1, C2], findings=[REF])


@pytest.mark.slow
def test_reward_with_the_real_model(shared_answer_cache, local_judge):
    """SmolLM2 judge: one finite float per completion, strings and chat alike; a
    completion too long for the judge's context fails and gets the failed reward."""
    reward_fn = radmatch_reward(judge=local_judge, judge_cache_dir=str(shared_answer_cache))
    runaway = "Small right pleural effusion. " * 1500  # a degenerate, never-ending output
    rewards = trl_call(reward_fn, [C1, chat(C2), chat(runaway)], [REF, REF, REF])
    assert len(rewards) == 3 and all(isinstance(r, float) and math.isfinite(r) for r in rewards)
    records = reward_fn.last_records
    for reward, record in zip(rewards[:2], records[:2]):  # by the adjudicated count, the default
        assert record.error is None and record.scores.adjudication == "current"
        assert reward == pytest.approx(1 / (1 + record.scores.significant_errors))
    assert records[2].error and "context" in records[2].error
    assert rewards[2] == 0.0 < min(rewards[:2])


def trl_call_logged(reward_fn, completions, references):
    """GRPOTrainer's full call (TRL >= 0.2x): trainer_state, log_extra and log_metric too."""
    logged: list[tuple[str, float]] = []
    n = len(completions)
    rewards = reward_fn(
        prompts=[[{"role": "user", "content": "Write the findings."}]] * n,
        completions=completions,
        completion_ids=[[1, 2, 3]] * n,
        reference=references,
        trainer_state=object(),
        log_extra=lambda column, values: None,
        log_metric=lambda name, value: logged.append((name, value)),
    )
    return rewards, dict(logged)


def test_failed_reward_none_is_passed_through_for_trl_to_skip():
    reward_fn = radmatch_reward(judge=ScriptedJudge(), cache=False, failed_reward=None)
    rewards, _ = trl_call_logged(reward_fn, [REF, "FAIL", chat(C1)], [REF, REF, REF])
    assert rewards[0] == 1.0 and rewards[1] is None and isinstance(rewards[2], float)
    # TRL turns None into NaN and leaves the sample out of its group's baseline
    import torch

    as_trl = torch.tensor([r if r is not None else torch.nan for r in rewards])
    assert torch.isnan(as_trl).tolist() == [False, True, False]
    with pytest.raises(ValueError, match="or None"):
        radmatch_reward(judge=ScriptedJudge(), failed_reward="skip")


def test_score_transform_maps_actionable_errors_to_the_reward():
    reward_fn = radmatch_reward(judge=ScriptedJudge(), cache=False,
                                score_transform=lambda errors: -float(errors))
    rewards, _ = trl_call_logged(reward_fn, [REF, C1, "FAIL"], [REF, REF, REF])
    errors = reward_fn.last_records[1].scores.actionable_errors
    assert rewards == [0.0, -float(errors), 0.0]  # a failure still gets failed_reward
    bad = radmatch_reward(judge=ScriptedJudge(), cache=False, score_transform=lambda e: float("nan"))
    with pytest.raises(ValueError, match="score_transform must map"):
        trl_call(bad, [REF], [REF])
    with pytest.raises(TypeError, match="score_transform"):
        radmatch_reward(judge=ScriptedJudge(), score_transform=2.0)


def test_failures_are_reported_through_trls_log_metric():
    reward_fn = radmatch_reward(judge=ScriptedJudge(), cache=False)
    rewards, logged = trl_call_logged(reward_fn, [REF, "FAIL", C1, "FAIL"], [REF] * 4)
    assert logged["radmatch/failed"] == 2.0 and logged["radmatch/failed_fraction"] == 0.5
    scored = [r.scores.actionable_errors for r in reward_fn.last_records if r.scores]
    assert logged["radmatch/mean_actionable_errors"] == pytest.approx(sum(scored) / 2)
    assert all(isinstance(v, float) for v in logged.values())
    assert rewards[1] == rewards[3] == 0.0
    # without log_metric (older TRL, or a plain call) nothing is logged and nothing breaks
    assert len(trl_call(reward_fn, [REF], [REF])) == 1


def test_building_the_reward_and_naming_its_judge_load_no_model(monkeypatch):
    """The embedded judge's model loads on the first reward call, not when the reward is
    built or `reward_fn.judge` is read (a trainer builds its reward functions early)."""
    from radmatch_audit.judges import factory

    built = []

    def counting_build_judge(config):
        built.append(config.resolved_backend)
        return ScriptedJudge()

    monkeypatch.setattr(factory, "build_judge", counting_build_judge)
    monkeypatch.delenv("RADMATCH_BASE_URL", raising=False)
    monkeypatch.delenv("RADMATCH_BACKEND", raising=False)
    reward_fn = radmatch_reward(cache=False)  # no server: the embedded judge
    assert reward_fn.judge == {"backend": "transformers", "model": "SmolLM2-135M-Instruct",
                               "endpoints": [], "embedded_small_judge": True}
    assert built == []
    trl_call(reward_fn, [C1], [REF])
    trl_call(reward_fn, [C2], [REF])
    assert built == ["transformers"]  # built on the first call, kept for the next


def test_a_served_judge_is_named_from_its_configuration_before_the_first_call(monkeypatch):
    from radmatch_audit.judges import factory

    monkeypatch.setattr(factory, "build_judge", lambda config: pytest.fail("the judge was built"))
    monkeypatch.delenv("RADMATCH_MODEL", raising=False)
    reward_fn = radmatch_reward(base_url="http://10.0.0.5:8000/v1,http://10.0.0.6:8000/v1", cache=False)
    assert reward_fn.judge == {"backend": "vllm", "model": "radmatch-judge",
                               "endpoints": ["10.0.0.5:8000", "10.0.0.6:8000"],
                               "embedded_small_judge": False}


def test_a_reward_call_costs_four_judge_calls_a_completion_and_one_a_reference():
    """The cost docs/metric.md states: extract, match, grade and adjudicate per completion
    that differs from its reference, the reference extracted once, and a completion seen
    before answered without a call."""
    from test_metric import C3

    judge = ScriptedJudge()
    reward_fn = radmatch_reward(judge=judge, cache=False)  # the run's memory, no disk cache
    trl_call(reward_fn, [C1, chat(C2), C3], [REF] * 3)
    stages = [stage for stage, _ in judge.calls]
    assert len(stages) == 1 + 3 * 4 and stages.count("extract") == 4 and stages.count("adjudicate") == 3
    assert sum(r.usage.judge_calls for r in reward_fn.last_records) == 13  # as the records keep it
    trl_call(reward_fn, [C1, "Small right pleural effusion."], [REF] * 2)
    assert len(judge.calls) == 13 + 4  # only the new completion's four calls
